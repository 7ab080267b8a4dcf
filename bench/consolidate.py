"""Consolidation in the background: does it move the add ack or search latency? (issue 31.2)

    python -m bench.consolidate                 # 10,000 memories, 3 rounds
    python -m bench.consolidate --items 2000 --rounds 1 --ops 100   # a quick run

One user with ``--items`` memories (synthetic text; 384-d unit vectors around
``items / 10`` random centres, so related memories cluster: about 0.86 alike
within a centre), loaded with COPY as ``bench.search`` loads (and listed for
the HNSW index: past 5,000 rows the product searches it through the index).
Then ``--rounds`` times, interleaved:

- **idle**: ``--ops`` operations, alternately an add (the add use case,
  ``services.query.memory.items.add_memory``: the ack) and a hybrid search (the
  search use case with the query vector given), nothing else running;
- **busy**: the same operations, one after another, for as long as a
  consolidation run of the user (``services.extractor.consolidation``, offline
  rule, no cap) runs in *another process* (as the extractor runs beside the
  query service); the run's observations and evidence are then removed (not
  timed) so the next round consolidates the whole user again.

Reports p50/p95 of adds and searches idle and busy, the change of p95, and
each run's statistics. The machine is shared (2 cores, other work running):
idle and busy windows alternate so both see the same load.
Writes bench/results/consolidate.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from bench.common import percentiles, stack, write_result
from bench.search import Data, load
from services.query.memory import items as ms
from services.query.ranking.memories import SearchParams, search
from shared.db import create_pool
from shared.migrate import apply
from shared.settings import CommonSettings
from shared.streams import Publisher

ROOT = Path(__file__).resolve().parent.parent
USER = "bench-consolidate"
DIM = 384

RESET = """
WITH gone AS (
    DELETE FROM memory_items WHERE user_id = $1 AND type = 'observation' RETURNING id
)
SELECT count(*) FROM gone
"""


class Clustered(Data):
    """``bench.search``'s data, with tighter clusters: ``centres`` centres, noise 0.4."""

    def __init__(self, centres: int, seed: int = 7) -> None:
        super().__init__(seed)
        self.centres = self.rng.standard_normal((centres, DIM)).astype(np.float32)

    def vectors(self, n: int) -> np.ndarray:
        c = self.centres[self.rng.integers(0, len(self.centres), n)]
        v = c + 0.4 * self.rng.standard_normal((n, DIM)).astype(np.float32)
        unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return unit


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def worker(db_url: str) -> None:
    """The consolidation run, in its own process; prints its statistics as JSON."""
    from services.extractor.consolidation import consolidate_user
    from shared.llm.offline import OfflineExtractor

    pool = await create_pool(db_url, min_size=1, max_size=2)
    try:
        stats = await consolidate_user(pool, USER, OfflineExtractor())
    finally:
        await pool.close()
    print(json.dumps(stats.as_dict()))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with stack() as (db_url, redis_url, _tmp):
        assert redis_url is not None
        await apply(db_url, DIM)
        pool = await create_pool(db_url, min_size=2, max_size=8)
        data = Clustered(max(1, args.items // 10))
        log(f"loading {args.items:,} memories for {USER} ...")
        loaded = await load(pool, [(USER, args.items)], data)
        settings = CommonSettings.model_validate({"database_url": db_url, "redis_url": redis_url})
        redis = aioredis.from_url(redis_url)
        publisher = Publisher(redis, settings)
        queries = [data.query() for _ in range(500)]
        samples: dict[str, dict[str, list[float]]] = {
            "idle": {"add": [], "search": []},
            "busy": {"add": [], "search": []},
        }
        counter = {"i": 0}

        async def op(window: str) -> None:
            i = counter["i"]
            counter["i"] += 1
            t = time.perf_counter()
            if i % 2 == 0:
                await ms.add_memory(
                    pool,
                    publisher,
                    user_id=USER,
                    item=ms.NewMemory(type="fact", content=f"bench add {i} " + data.texts(1)[0]),
                )
                samples[window]["add"].append(time.perf_counter() - t)
            else:
                text, vec = queries[i % len(queries)]
                await search(pool, SearchParams(query=text, limit=10), user_id=USER, vector=vec)
                samples[window]["search"].append(time.perf_counter() - t)

        for _ in range(20):  # warm up
            await op("idle")
        samples["idle"] = {"add": [], "search": []}
        runs: list[dict[str, Any]] = []
        for r in range(args.rounds):
            for _ in range(args.ops):
                await op("idle")
            log(f"round {r + 1}: idle done; consolidating in another process ...")
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.consolidate",
                "--worker",
                db_url,
                stdout=subprocess.PIPE,
                cwd=ROOT,
            )
            busy = 0
            while proc.returncode is None:
                await op("busy")
                busy += 1
                try:
                    await asyncio.wait_for(proc.wait(), timeout=0.001)
                except TimeoutError:
                    pass
            out = (await proc.stdout.read()).decode() if proc.stdout else ""
            if proc.returncode != 0:
                raise RuntimeError(f"consolidation worker failed ({proc.returncode})")
            stats = json.loads(out.strip().splitlines()[-1])
            stats["ops_while_running"] = busy
            runs.append(stats)
            log(f"round {r + 1}: {stats}")
            removed = await pool.fetchval(RESET, USER)
            log(f"round {r + 1}: {removed} observations removed for the next round")
        await redis.aclose()
        await pool.close()
    result: dict[str, Any] = {"load": loaded, "runs": runs}
    for window, kinds in samples.items():
        for kind, xs in kinds.items():
            result[f"{kind}/{window}"] = percentiles(xs)
    for kind in ("add", "search"):
        idle, busy = result[f"{kind}/idle"]["p95_ms"], result[f"{kind}/busy"]["p95_ms"]
        result[f"{kind}/p95_change"] = round(busy / idle - 1, 3) if idle else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=300, help="operations per idle window")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.worker))
        return
    started = time.perf_counter()
    result = asyncio.run(run(args))
    report = {
        "benchmark": "consolidate",
        "items": args.items,
        "rounds": args.rounds,
        "note": "2-core machine shared with other helpers' work (tests, benches): "
        "idle and busy windows are interleaved so both see the same load",
        "result": result,
        "seconds": round(time.perf_counter() - started, 1),
    }
    path = write_result("consolidate", report)
    rows = [
        f"{k:<16} n={v['n']:>5}  p50 {v['p50_ms']:8.2f} ms  p95 {v['p95_ms']:8.2f} ms"
        for k, v in result.items()
        if isinstance(v, dict) and "p95_ms" in v
    ]
    print("\n".join(rows))
    print(f"p95 change busy vs idle: add {result['add/p95_change']}, "
          f"search {result['search/p95_change']}")  # fmt: skip
    print(f"runs: {result['runs']}")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
