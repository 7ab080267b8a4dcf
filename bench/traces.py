"""bench/traces (``python -m bench.ingest --traces``): what tracing costs ingest.

Ingest throughput (bench/ingest's pipeline: N turns XADDed, ingest in its own process,
timed until every one is committed), three ways on the same PostgreSQL, Redis and
machine, interleaved in each round (the order rotates, so no way always runs first):

- ``old``: ingest from another checkout (``--old``, e.g. main before tracing existed);
  without ``--old``, this checkout's code exported as it was at ``git merge-base HEAD
  main`` (``git archive``);
- ``off``: this checkout, no endpoint (tracing off: the default);
- ``on``: this checkout, ``ENGRAM_TRACES_ENDPOINT`` at a local dummy OTLP/HTTP collector
  (a thread answering 200), every span exported (sample ratio 1);
- ``on 1%``: the same, ``ENGRAM_TRACES_SAMPLE_RATIO=0.01``.

Each run gives the throughput and the CPU the ingest process spent per 1000 turns
(its start-up excluded): on a machine other work keeps loaded the CPU is the steadier
measure of the code's cost. Prints each run and the medians; the target is ``off``
within 2% of ``old``. Writes ``bench/results/traces.json``.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.common import bench_stack, table, write_result
from bench.ingest import make_turns, pipeline_run

ROOT = Path(__file__).resolve().parent.parent


class DummyCollector:
    """An OTLP/HTTP receiver on loopback that keeps the bodies it is sent (decoded
    after the clock stops) and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                collector.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take_spans(self) -> int:
        """Spans received since the last call."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        bodies, self.bodies = self.bodies, []
        n = 0
        for body in bodies:
            req = ExportTraceServiceRequest.FromString(body)
            n += sum(len(s.spans) for r in req.resource_spans for s in r.scope_spans)
        return n

    def stop(self) -> None:
        self.server.shutdown()


def _base_checkout() -> Path:
    """This repository at its merge base with main, exported to a temporary folder."""
    base = subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    out = Path(tempfile.mkdtemp(prefix="engram-bench-traces-old-"))
    archive = subprocess.run(["git", "archive", base], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    print(f"old = {base[:10]} (git merge-base HEAD main) in {out}")
    return out


def traces_runs(
    turns_n: int, rounds: int, *, old: Path | None, only: list[str] | None = None
) -> None:
    """``only``: run just these ways (e.g. ``old``, ``off``: the 2% question alone)."""
    made = old is None
    old_code = _base_checkout() if old is None else old.resolve()
    collector = DummyCollector()
    ways: dict[str, dict[str, Any]] = {
        "old": {"code": old_code},
        "off": {"code": ROOT},
        "on": {"code": ROOT, "extra_env": {"ENGRAM_TRACES_ENDPOINT": collector.url}},
        "on 1%": {
            "code": ROOT,
            "extra_env": {
                "ENGRAM_TRACES_ENDPOINT": collector.url,
                "ENGRAM_TRACES_SAMPLE_RATIO": "0.01",
            },
        },
    }
    if only:
        ways = {k: v for k, v in ways.items() if k in only}
    rates: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}  # ingest CPU ms per 1000 turns
    spans_per_turn: list[float] = []
    order = list(ways)
    print(f"bench/ingest --traces: {turns_n:,} turns a run, {rounds} rounds of {order}")
    try:
        with bench_stack("traces") as settings:
            for r in range(rounds):
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    run = f"t{uuid.uuid4().hex[:6]}"
                    spent: list[float] = []
                    seconds = asyncio.run(
                        pipeline_run(
                            settings, make_turns(turns_n, run), run, cpu=spent, **ways[name]
                        )
                    )
                    rates[name].append(turns_n / seconds)
                    cpu[name].append(spent[0] * 1e6 / turns_n)
                    note = ""
                    if name.startswith("on"):
                        # the process flushed its spans as it stopped
                        received = collector.take_spans() / turns_n
                        if name == "on":
                            spans_per_turn.append(received)
                        note = f"  ({received:.2f} spans per turn received)"
                    print(
                        f"round {r + 1} {name:>5}: {rates[name][-1]:,.0f} turns/s, ingest "
                        f"CPU {cpu[name][-1]:,.0f} ms per 1000 turns{note}"
                    )
    finally:
        collector.stop()
        if made:
            shutil.rmtree(old_code, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    result = {
        "turns": turns_n,
        "rounds": rounds,
        "turns_per_s": {k: [round(x) for x in v] for k, v in rates.items()},
        "median_turns_per_s": {k: round(v) for k, v in med.items()},
        "off_vs_old": round(med["off"] / med["old"] - 1, 4),
        "ingest_cpu_ms_per_1000_turns": {k: [round(x) for x in v] for k, v in cpu.items()},
        "median_ingest_cpu_ms_per_1000_turns": {k: round(v) for k, v in med_cpu.items()},
        "cpu_off_vs_old": round(med_cpu["off"] / med_cpu["old"] - 1, 4),
        **(
            {
                "on_vs_off": round(med["on"] / med["off"] - 1, 4),
                "on_1pct_vs_off": round(med["on 1%"] / med["off"] - 1, 4),
            }
            if len(ways) == 4
            else {}
        ),
        "spans_per_turn_received": [round(x, 3) for x in spans_per_turn],
        "target_off_vs_old": -0.02,
    }
    path = write_result("traces" if len(ways) == 4 else "traces_" + "_".join(ways), result)
    print(
        table(
            [(f"round {i + 1}", *(f"{rates[k][i]:,.0f}" for k in ways)) for i in range(rounds)]
            + [("median", *(f"{med[k]:,.0f}" for k in ways))],
            ("turns/s", *ways),
        )
    )
    print(
        table(
            [(f"round {i + 1}", *(f"{cpu[k][i]:,.0f}" for k in ways)) for i in range(rounds)]
            + [("median", *(f"{med_cpu[k]:,.0f}" for k in ways))],
            ("ingest CPU ms / 1000 turns", *ways),
        )
    )
    ratios = [o / b for b, o in zip(cpu["old"], cpu["off"], strict=True)]
    result["cpu_off_over_old_per_round"] = [round(x, 3) for x in ratios]
    write_result(path.stem, result)
    print(
        f"off vs old {result['off_vs_old']:+.1%} turns/s, {result['cpu_off_vs_old']:+.1%} CPU "
        f"(median of per-round CPU ratios {statistics.median(ratios) - 1:+.1%}; target: "
        f"within 2%)"
        + (
            f", on vs off {result['on_vs_off']:+.1%}, on 1% vs off {result['on_1pct_vs_off']:+.1%}"
            if "on_vs_off" in result
            else ""
        )
        + f"   -> {path}"
    )
