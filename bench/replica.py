"""Read-your-writes through a streaming replica: add-then-search pairs, misses counted.

Starts an embedded PostgreSQL primary, a streaming replica of it
(``engram_cli/replica.py``, ``pg_basebackup -R``) and a Redis, and two query
instances in this process (the API over ASGI, no network): each pair adds a memory with
a unique token through instance A and searches for the token through instance B (the
write's WAL position shared in Redis), ``--users`` users at once. A pair whose search
does not find its add is a miss. Then the same pairs with every read on the primary
(no read URL), for the latency side by side.

    python -m bench.replica --pairs 10000

The query side embeds with a fixed vector made from a hash of the text (no model):
the numbers are the database and the routing, not the model. Results: bench/results/replica.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from pydantic import SecretStr

from bench.common import Progress, percentiles, table, write_result
from engram_cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from engram_cli.replica import PRIMARY_CONFIG, EmbeddedReplica
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.db import create_pool
from shared.embeddings.user_settings import Stored
from shared.migrate import apply
from shared.settings import CommonSettings


class _HashEmbedder:
    provider = "local"
    model = "text-hash-384"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for t in texts:
            seed = hashlib.sha256(t.encode()).digest()
            v = [(seed[i % 32] - 127.5) / 127.5 for i in range(384)]
            norm = sum(x * x for x in v) ** 0.5
            out.append([x / norm for x in v])
        return out


async def _resolve(
    pool: asyncpg.Pool, user_id: str, settings: CommonSettings, /, *, stored: Stored | None = None
) -> _HashEmbedder:
    return _HashEmbedder()


async def _run(settings: QuerySettings, pairs: int, users: int, label: str) -> dict[str, Any]:
    pool = await create_pool(settings.require_database_url(), max_size=2)
    keys = {}
    for i in range(users):
        user = f"bench-{uuid.uuid4().hex[:8]}-{i}"
        _, secret = await create_key(pool, user_id=user)
        keys[user] = {"Authorization": f"Bearer {secret}"}
    await pool.close()
    adds: list[float] = []
    searches: list[float] = []
    misses = 0
    progress = Progress(label, pairs)
    async with AsyncExitStack() as stack:
        apps = [create_app(settings, resolver=_resolve) for _ in range(2)]
        clients = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            clients.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(transport=transport, base_url="http://bench")
                )
            )
        a, b = clients
        done = 0

        async def worker(h: dict[str, str], n: int) -> None:
            nonlocal misses, done
            for i in range(n):
                token = f"zq{uuid.uuid4().hex[:12]}"
                started = time.perf_counter()
                r = await a.post(
                    "/v1/memory/add",
                    headers=h,
                    json={"type": "fact", "content": f"pair {i} remembers {token}"},
                )
                adds.append(time.perf_counter() - started)
                r.raise_for_status()
                started = time.perf_counter()
                r = await b.post("/v1/memory/search", headers=h, json={"query": token, "limit": 50})
                searches.append(time.perf_counter() - started)
                r.raise_for_status()
                if not any(token in hit["content_snippet"] for hit in r.json()["results"]):
                    misses += 1
                done += 1
                progress.update(done)

        started = time.perf_counter()
        await asyncio.gather(*(worker(h, pairs // users) for h in keys.values()))
        elapsed = time.perf_counter() - started
        progress.update(done, force=True)
        reads: Counter[str] = Counter()
        wait_sum = wait_count = 0.0
        for metric in apps[1].state.reads.reads.collect():
            for s in metric.samples:
                if s.name.endswith("_total"):
                    reads[f"{s.labels['db']}/{s.labels['why']}"] += int(s.value)
        for metric in apps[1].state.reads.waits.collect():
            for s in metric.samples:
                if s.name.endswith("_sum"):
                    wait_sum = s.value
                elif s.name.endswith("_count"):
                    wait_count = s.value
    return {
        "pairs": done,
        "misses": misses,
        "seconds": round(elapsed, 1),
        "add": percentiles(adds),
        "search": percentiles(searches),
        "reads": dict(reads),
        "mean_wait_ms": round(wait_sum / wait_count * 1000, 2) if wait_count else 0.0,
        "waits": int(wait_count),
    }


async def _bench(args: argparse.Namespace, db: str, read: str, redis: str) -> dict[str, Any]:
    await apply(db, embedding_dim=384)
    base = QuerySettings(
        database_url=SecretStr(db),
        redis_url=SecretStr(redis),
        warm_up=False,
        stream_prefix=f"bench{uuid.uuid4().hex[:6]}:",
        read_your_writes_wait_ms=args.wait_ms,
    )
    out = {}
    replica = base.model_copy(update={"database_read_url": SecretStr(read)})
    out["replica"] = await _run(replica, args.pairs, args.users, "via the replica")
    out["primary"] = await _run(base, args.baseline, args.users, "primary only")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=10_000)
    p.add_argument("--baseline", type=int, default=2_000, help="pairs with reads on the primary")
    p.add_argument("--users", type=int, default=10, help="users adding and searching at once")
    p.add_argument("--wait-ms", type=int, default=250, help="ENGRAM_READ_YOUR_WRITES_WAIT_MS")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-replica-"))
    primary = EmbeddedPostgres(tmp / "primary", config=dict(PRIMARY_CONFIG))
    replica = EmbeddedReplica.of(primary, tmp / "replica", free_port())
    redis = EmbeddedRedis(tmp / "redis", port=free_port())
    try:
        db = primary.start()
        read = replica.start()
        result = asyncio.run(_bench(args, db, read, redis.start(persistent=False)))
    finally:
        redis.stop()
        replica.stop()
        primary.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rows: list[tuple[str, ...]] = []
    for name, r in result.items():
        rows.append(
            (
                name,
                f"{r['pairs']:,}",
                str(r["misses"]),
                f"{r['add']['p50_ms']:.1f} / {r['add']['p95_ms']:.1f}",
                f"{r['search']['p50_ms']:.1f} / {r['search']['p95_ms']:.1f}",
                ", ".join(f"{k} {v}" for k, v in sorted(r["reads"].items())) or "-",
            )
        )
    header = ("reads", "pairs", "misses", "add p50/p95 ms", "search p50/p95 ms", "served")
    print(table(rows, header))
    r = result["replica"]
    print(f"waits for the replica: {r['waits']}, mean {r['mean_wait_ms']} ms")
    print(f"-> {write_result('replica', {'args': vars(args), **result})}")


if __name__ == "__main__":
    main()
