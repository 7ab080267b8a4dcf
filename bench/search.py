"""Search benchmark: hybrid search and ``add`` latency at 100k items/user, 1M items in all.

    python -m bench.search            # or: make bench-search
    python -m bench.search --total 200000 --big 50000 --users 200   # a quicker run

Data: one big user with ``--big`` items and ``--users`` users holding ``--total``
items in all (including a user with exactly 50), loaded with COPY. The text is
synthetic (words drawn from a Zipf-Mandelbrot vocabulary) and so are the vectors
(unit vectors scattered around 256 random centres): realistic enough for index
behaviour, not for relevance. Starts embedded PostgreSQL and Redis in a temp
dir unless ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL are set.

Measured, each at concurrency 1 and 16:
- ``server``: the hybrid search use case in this process (query vector given,
  no query embedding) — what the service spends per search;
- ``floor``: a bare pgvector top-10 for the same user, by the product's path
  for that user: HNSW with iterative scan for a large user, the exact scan for
  one with at most 5,000 embedded rows;
- ``http``: POST /v1/memory/search against a real uvicorn server that embeds
  the query with the local all-MiniLM-L6-v2 model;
- ``add``: the add use case in process, and POST /v1/memory/add over HTTP.
Writes bench/results/search.json and prints a table.
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import bench_postgres  # noqa: E402
from engram_cli.embedded import EmbeddedRedis, free_port  # noqa: E402
from services.query.memory import items as ms  # noqa: E402
from services.query.ranking.memories import (  # noqa: E402
    SearchParams,
    search,
    uses_index,
)
from services.query.ranking.sql import walk_settings  # noqa: E402
from shared.apikeys import create_key  # noqa: E402
from shared.db import create_pool  # noqa: E402
from shared.embeddings import vector_index  # noqa: E402
from shared.migrate import apply  # noqa: E402
from shared.settings import CommonSettings  # noqa: E402
from shared.streams import Publisher  # noqa: E402

DIM = 384
BIG, SMALL = "bench-big", "bench-small"
VOCAB = [f"w{i}" for i in range(50_000)]
FLOOR_SQL = """
SELECT id FROM memory_items WHERE user_id = $1 AND vector_indexed AND embedding_state = 'ready'
ORDER BY embedding::halfvec(384) <=> $2::vector::halfvec(384) LIMIT 10
"""
# What the product does for a user with few embedded rows: every row compared.
FLOOR_EXACT_SQL = """
SELECT id FROM memory_items
WHERE user_id = $1 AND embedding_state = 'ready' AND embedding IS NOT NULL
ORDER BY (embedding <=> $2::vector) + 0 LIMIT 10
"""


def log(msg: str) -> None:
    print(msg, flush=True)


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)

    def p(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 2)

    return {
        "n": len(s),
        "p50_ms": p(0.50),
        "p95_ms": p(0.95),
        "p99_ms": p(0.99),
        "mean_ms": round(statistics.fmean(s) * 1000, 2),
    }


async def measure(fn: Callable[[int], Awaitable[Any]], n: int, concurrency: int) -> dict[str, Any]:
    samples: list[float] = []
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            t = time.perf_counter()
            await fn(i)
            samples.append(time.perf_counter() - t)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    out = percentiles(samples)
    out["concurrency"] = concurrency
    out["throughput_per_s"] = round(n / (time.perf_counter() - started), 1)
    return out


class Data:
    def __init__(self, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.centres = self.rng.standard_normal((256, DIM)).astype(np.float32)
        # Zipf-Mandelbrot: the commonest word is in ~3% of items, as content words
        # are in real text once stop words are dropped.
        weights = 1.0 / (np.arange(1, len(VOCAB) + 1) + 50)
        self.word_p = weights / weights.sum()

    def vectors(self, n: int) -> np.ndarray:
        c = self.centres[self.rng.integers(0, len(self.centres), n)]
        v = c + 0.6 * self.rng.standard_normal((n, DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def texts(self, n: int) -> list[str]:
        words = self.rng.choice(len(VOCAB), size=(n, 12), p=self.word_p)
        return [" ".join(VOCAB[w] for w in row) for row in words]

    def query(self) -> tuple[str, list[float]]:
        words = self.rng.choice(len(VOCAB), size=3, p=self.word_p)
        return " ".join(VOCAB[w] for w in words), list(map(float, self.vectors(1)[0]))


def plan_users(total: int, big: int, users: int) -> list[tuple[str, int]]:
    rest = total - big - 50
    others = users - 2
    each, extra = divmod(rest, others)
    plan = [(BIG, big), (SMALL, 50)]
    plan += [(f"bench-u{i:04d}", each + (1 if i < extra else 0)) for i in range(others)]
    return plan


async def load(pool: asyncpg.Pool, plan: list[tuple[str, int]], data: Data) -> dict[str, Any]:
    """COPY the items with every secondary index dropped, then rebuild them."""
    async with pool.acquire() as conn:
        if await conn.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", BIG):
            log("data already loaded; skipping the load")
            return {"skipped": True}
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_items' "
            "AND indexname <> 'memory_items_pkey'"
        )
        for ix in indexes:
            await conn.execute(f'DROP INDEX "{ix["indexname"]}"')
        await conn.copy_records_to_table("users", records=[(u,) for u, _ in plan], columns=["id"])
        await conn.executemany(
            "INSERT INTO themes (user_id, slug, display_name) VALUES ($1, 'general', 'General')",
            [(u,) for u, _ in plan],
        )
        total = sum(n for _, n in plan)
        done, started = 0, time.perf_counter()
        rows: list[tuple[Any, ...]] = []
        batch = 50_000

        async def flush() -> None:
            nonlocal done, rows
            await conn.copy_records_to_table(
                "memory_items",
                records=rows,
                columns=[
                    "user_id",
                    "type",
                    "content",
                    "embedding",
                    "embedding_state",
                    "created_at",
                ],
            )
            done += len(rows)
            rows = []
            rate = done / (time.perf_counter() - started)
            log(f"  loaded {done:>9,}/{total:,} items  ({rate:,.0f}/s)")

        base = time.time() - 86400 * 365
        for user, n in plan:
            left = n
            while left:
                take = min(left, batch - len(rows))
                vecs, texts = data.vectors(take), data.texts(take)
                stamps = data.rng.uniform(base, time.time(), take)
                from datetime import UTC, datetime

                rows += [
                    (user, "fact", t, v, "ready", datetime.fromtimestamp(s, UTC))
                    for t, v, s in zip(texts, vecs, stamps, strict=True)
                ]
                left -= take
                if len(rows) >= batch:
                    await flush()
        if rows:
            await flush()
        load_s = time.perf_counter() - started
        # What the embedder does for a user past the exact-scan limit: list them and
        # mark their rows for the (partial) HNSW index.
        for user, n in plan:
            if n > vector_index.MIN_ROWS:
                log(f"  listing {user} ({n:,} items) for the vector index ...")
                await vector_index.index_user(conn, user, "memory", settle_s=0)
        await conn.execute("SET maintenance_work_mem = '4GB'")
        await conn.execute("SET max_parallel_maintenance_workers = 1")
        timings = {}
        for ix in indexes:
            log(f"  building {ix['indexname']} ...")
            t = time.perf_counter()
            # a partitioned index (migration 0170) reads "ON ONLY memory_items": built
            # again, it must reach every partition
            ddl = ix["indexdef"].replace(" ON ONLY ", " ON ", 1)
            task = asyncio.create_task(conn.execute(ddl))
            shown = t
            while not task.done():
                await asyncio.sleep(0.1)
                if not task.done() and time.perf_counter() - shown >= 15:
                    shown = time.perf_counter()
                    prog = await pool.fetchrow(
                        "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total "
                        "FROM pg_stat_progress_create_index"
                    )
                    if prog:
                        log(
                            f"    {prog['phase']}: tuples {prog['tuples_done']:,}"
                            f"/{prog['tuples_total']:,} blocks {prog['blocks_done']:,}"
                            f"/{prog['blocks_total']:,}  ({time.perf_counter() - t:.0f}s)"
                        )
            await task
            timings[ix["indexname"]] = round(time.perf_counter() - t, 1)
        log("  VACUUM ANALYZE ...")
        await conn.execute("VACUUM ANALYZE memory_items")
    return {"items": total, "copy_seconds": round(load_s, 1), "index_seconds": timings}


def start_server(settings: CommonSettings, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        {
            "ENGRAM_DATABASE_URL": settings.require_database_url(),
            "ENGRAM_REDIS_URL": settings.require_redis_url(),
            "ENGRAM_QUERY_PORT": str(port),
            "ENGRAM_LOG_LEVEL": "WARNING",
            "ENGRAM_DB_POOL_MAX": "16",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return subprocess.Popen([sys.executable, "-m", "bench.search_server"], env=env, cwd=ROOT)


async def wait_http(port: int, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as c:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError("bench server exited")
            try:
                if (await c.get(f"http://127.0.0.1:{port}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("bench server did not start")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = CommonSettings()
    servers: list[Any] = []
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    if settings.database_url is None:
        log(f"starting embedded PostgreSQL in {tmp} ...")
        pg = bench_postgres(tmp / "pg")
        servers.append(pg)
        settings = settings.model_copy(update={"database_url": _secret(pg.start())})
    if settings.redis_url is None:
        rd = EmbeddedRedis(tmp / "redis", port=free_port())
        servers.append(rd)
        settings = settings.model_copy(update={"redis_url": _secret(rd.start(persistent=False))})
    try:
        return await _bench(args, settings)
    finally:
        for s in reversed(servers):
            s.stop()


def _secret(value: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(value)


async def _bench(args: argparse.Namespace, settings: CommonSettings) -> dict[str, Any]:
    url = settings.require_database_url()
    await apply(url, DIM)
    pool = await create_pool(url, min_size=2, max_size=20)
    data = Data()
    plan = plan_users(args.total, args.big, args.users)
    log(
        f"loading {sum(n for _, n in plan):,} items for {len(plan):,} users "
        f"({args.big:,} for {BIG}) ..."
    )
    loaded = await load(pool, plan, data)
    queries = [data.query() for _ in range(1000)]
    results: dict[str, Any] = {"load": loaded}

    async def hybrid(user: str, i: int) -> None:
        text, vec = queries[i % len(queries)]
        await search(pool, SearchParams(query=text, limit=10), user_id=user, vector=vec)

    async def floor(user: str, i: int) -> None:
        vec = np.asarray(queries[i % len(queries)][1], dtype=np.float32)
        async with pool.acquire() as conn:
            if not await uses_index(conn, user):
                await conn.fetch(FLOOR_EXACT_SQL, user, vec)
                return
            async with conn.transaction():
                await conn.execute(walk_settings())
                await conn.fetch(FLOOR_SQL, user, vec)

    small_user = "bench-u0001"
    for name, fn in (("hybrid_server", hybrid), ("pgvector_floor", floor)):
        for user in (BIG, small_user):
            for c in (1, 16):
                n = args.n if c == 1 else args.n * 2
                await measure(lambda i, u=user, f=fn: f(u, i), 20, c)  # warm up
                key = f"{name}/{'big' if user == BIG else 'regular'}/c{c}"
                results[key] = await measure(lambda i, u=user, f=fn: f(u, i), n, c)
                log(f"  {key}: {results[key]}")
    got = await search(
        pool, SearchParams(query="w1 w2", limit=10), user_id=SMALL, vector=queries[0][1]
    )
    results["small_user_50_items_k10"] = len(got.hits)

    redis = __import__("redis.asyncio", fromlist=["from_url"]).from_url(
        settings.require_redis_url()
    )
    publisher = Publisher(redis, settings)

    async def add(i: int) -> None:
        await ms.add_memory(
            pool,
            publisher,
            user_id=BIG,
            item=ms.NewMemory(type="fact", content=f"bench add number {i} " + data.texts(1)[0]),
        )

    await measure(add, 20, 1)
    results["add_server/c1"] = await measure(add, args.n, 1)
    results["add_server/c16"] = await measure(add, args.n * 2, 16)
    log(f"  add_server: {results['add_server/c1']} / {results['add_server/c16']}")

    port = free_port()
    proc = start_server(settings, port)
    try:
        await wait_http(port, proc)
        _, secret = await create_key(pool, user_id=BIG)
        h = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=h, timeout=60
        ) as client:
            words = [" ".join(VOCAB[j] for j in data.rng.integers(0, 300, 3)) for _ in range(200)]
            mode: dict[str, int] = {}

            async def http_search(i: int) -> None:
                r = await client.post(
                    "/v1/memory/search", json={"query": words[i % len(words)], "limit": 10}
                )
                r.raise_for_status()
                mode[r.json()["mode"]] = mode.get(r.json()["mode"], 0) + 1

            async def http_add(i: int) -> None:
                r = await client.post(
                    "/v1/memory/add",
                    json={"type": "fact", "content": f"http add {i} " + words[i % len(words)]},
                )
                r.raise_for_status()

            await measure(http_search, 10, 1)
            for c in (1, 16):
                n = args.n if c == 1 else args.n * 2
                results[f"hybrid_http_local_embedding/big/c{c}"] = await measure(http_search, n, c)
                log(f"  http search c{c}: {results[f'hybrid_http_local_embedding/big/c{c}']}")
            results["http_search_modes"] = mode
            await measure(http_add, 10, 1)
            results["add_http/c1"] = await measure(http_add, args.n, 1)
            results["add_http/c16"] = await measure(http_add, args.n * 2, 16)
    finally:
        proc.terminate()
        proc.wait(20)
        await redis.aclose()
        await pool.close()
    return results


def table(results: dict[str, Any]) -> str:
    lines = [f"{'measurement':<45} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'rps':>8}"]
    for key, v in results.items():
        if isinstance(v, dict) and "p95_ms" in v:
            lines.append(
                f"{key:<45} {v['n']:>5} {v['p50_ms']:>8} {v['p95_ms']:>8} "
                f"{v['p99_ms']:>8} {v['throughput_per_s']:>8}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--n", type=int, default=300, help="requests per measurement at c=1")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "search.json")
    args = parser.parse_args()
    started = time.perf_counter()
    results = asyncio.run(run(args))
    report = {
        "benchmark": "search",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "note": "2-core machine shared with other engineers' work; "
            "numbers are noisy upper bounds",
        },
        "data": {
            "total_items": args.total,
            "big_user_items": args.big,
            "users": args.users,
            "vectors": "synthetic: 384-d unit vectors around 256 random centres",
            "text": "synthetic: 12 words from a Zipf-Mandelbrot 50,000-word vocabulary",
        },
        "targets": {"hybrid_server_p95_ms_at_100k": 15, "add_p95_ms": 5},
        "results": results,
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print()
    print(table(results))
    print(
        f"\nsmall user (50 items among {args.total:,}) got "
        f"{results['small_user_50_items_k10']} of 10 results"
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
