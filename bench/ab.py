"""Old code against new code, alternated in one run on one database: search and context latency.

    python -m bench.ab --old /path/to/old/checkout [--rounds 3]

For a change that must not make anything slower (a refactor): the data is loaded
once (``bench.search``'s synthetic items, a big user among many; ``bench.context``'s
user with memories and messages), then each round runs the old checkout, then the
new one, each as a child process with its own code first on the path, against the
same database under the same load:

- ``search``: the hybrid memory search use case in process for the big user, c1
  and c16 (``bench.search``'s ``hybrid_server``, query vector given);
- ``context``: ``bench.context``'s measurement (policy ``auto``: query embedding +
  assembly in process, then ``POST /v1/context`` in-process HTTP).

The old checkout must have ``bench/search.py`` and ``bench/context.py`` with the
same ``measure`` functions (each child uses its own checkout's). Prints every
round and the median new/old ratio per series; writes ``bench/results/ab.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import context as bctx
from bench import search as bsearch
from bench.common import bench_postgres
from engram_cli.embedded import EmbeddedRedis, free_port
from shared.db import create_pool
from shared.migrate import apply

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "ab.json"

SEARCH_CHILD = """
import asyncio, json, sys
from bench.search import BIG, Data, measure
from services.query.ranking.memories import SearchParams, search
from shared.db import create_pool

async def main(url, n):
    pool = await create_pool(url, min_size=2, max_size=20)
    data = Data(seed=11)
    queries = [data.query() for _ in range(1000)]

    async def hybrid(i):
        text, vec = queries[i % len(queries)]
        await search(pool, SearchParams(query=text, limit=10), user_id=BIG, vector=vec)

    await measure(hybrid, 20, 1)
    out = {"search c1": await measure(hybrid, n, 1), "search c16": await measure(hybrid, 2 * n, 16)}
    await pool.close()
    print("RESULT " + json.dumps(out))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""

CONTEXT_CHILD = """
import asyncio, json, sys
from bench.context import measure

rows = asyncio.run(measure(sys.argv[1], sys.argv[2], sys.argv[3], queries=int(sys.argv[4]), seed=7))
print("RESULT " + json.dumps({"context " + r["series"].strip(): r for r in rows}))
"""


def child(code: Path, script: str, *args: str) -> dict[str, dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(code), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, dict[str, Any]] = json.loads(line.removeprefix("RESULT "))
            return result
    raise RuntimeError(f"child in {code} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def load_avg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


async def load(url: str, args: argparse.Namespace, context_user: str) -> None:
    pool = await create_pool(url, min_size=1, max_size=4)
    try:
        plan = bsearch.plan_users(args.total, args.big, args.users)
        print(f"loading {args.total:,} search items ({args.big:,} for the big user) ...")
        await bsearch.load(pool, plan, bsearch.Data())
    finally:
        await pool.close()
    print(f"loading the context user ({args.memories:,} memories, {args.messages:,} messages) ...")
    await bctx.load(url, context_user, memories=args.memories, messages=args.messages, seed=7)


def report(rounds: list[dict[str, Any]]) -> tuple[str, dict[str, dict[str, float]]]:
    series = list(rounds[0]["old"])
    lines = [
        f"{'series':<44} {'round':>5} {'old p50':>8} {'new p50':>8} {'old p95':>8} {'new p95':>8}"
    ]
    ratios: dict[str, dict[str, float]] = {}
    for s in series:
        p50: list[float] = []
        p95: list[float] = []
        for i, r in enumerate(rounds, 1):
            o, n = r["old"][s], r["new"][s]
            cells = [o["p50_ms"], n["p50_ms"], o["p95_ms"], n["p95_ms"]]
            lines.append(f"{s:<44} {i:>5} " + " ".join(f"{c:>8}" for c in cells))
            p50.append(n["p50_ms"] / o["p50_ms"])
            p95.append(n["p95_ms"] / o["p95_ms"])
        ratios[s] = {
            "p50_new_over_old": round(statistics.median(p50), 3),
            "p95_new_over_old": round(statistics.median(p95), 3),
        }
        lines.append(
            f"{'':<44} {'ratio':>5} new/old median p50 {ratios[s]['p50_new_over_old']}, "
            f"p95 {ratios[s]['p95_new_over_old']}"
        )
    return "\n".join(lines), ratios


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-ab-"))
    pg = bench_postgres(tmp / "pg")
    rd = EmbeddedRedis(tmp / "redis", port=free_port())
    url = await asyncio.to_thread(pg.start)
    redis_url = rd.start(persistent=False)
    try:
        await apply(url, embedding_dim=384)
        context_user = f"bench-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        await load(url, args, context_user)
        print(f"loaded in {time.perf_counter() - t0:.0f} s; load average {load_avg()}")
        codes = {"old": args.old.resolve(), "new": ROOT}
        rounds: list[dict[str, Any]] = []
        for r in range(1, args.rounds + 1):
            got: dict[str, Any] = {"load_avg_before": load_avg()}
            for name in ("old", "new"):
                t = time.perf_counter()
                res = child(codes[name], SEARCH_CHILD, url, str(args.n))
                res |= child(
                    codes[name], CONTEXT_CHILD, url, redis_url, context_user, str(args.queries)
                )
                got[name] = res
                print(
                    f"round {r}/{args.rounds} {name}: {time.perf_counter() - t:.0f} s "
                    f"(load {load_avg()})",
                    flush=True,
                )
            rounds.append(got)
    finally:
        rd.stop()
        pg.stop()
    text, ratios = report(rounds)
    return {"rounds": rounds, "ratios": ratios, "table": text}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True, help="checkout of the old code")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--total", type=int, default=200_000, help="search items in all")
    p.add_argument("--big", type=int, default=50_000, help="search items of the big user")
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--n", type=int, default=200, help="searches per measurement at c1")
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--queries", type=int, default=100, help="context queries per measurement")
    args = p.parse_args()
    result = asyncio.run(run(args))
    print()
    print(result["table"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "old": str(args.old),
                "args": {k: str(v) for k, v in vars(args).items()},
                "machine": {
                    "python": sys.version.split()[0],
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "note": "2 cores shared with other engineers' jobs while running",
                },
                **result,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
