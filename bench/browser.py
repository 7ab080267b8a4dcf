"""Server time of the memory browser's pages for a user with 10,000 memories.

One user holds ``--items`` memories (12 themes, every type, 5% archived, 2%
superseded, 1% with an embedding error, the rest with a 384-d vector), 50
people, 500 summarised episodes and 200 facts to review; 20 other users hold
500 memories each, so every statement has to filter by user. Each page is
requested ``--requests`` times through the query service's ASGI app in-process
(cookie auth, routing, SQL, Jinja2 rendering; no network, no browser), after a
warm-up. The search page embeds its query with an instant fixed vector, so the
time is the hybrid search's and not a provider's.

Runs its own embedded PostgreSQL and Redis unless ENGRAM_DATABASE_URL /
ENGRAM_REDIS_URL are set. Writes bench/results/browser.json and prints a table.

    python -m bench.browser [--items 10000] [--requests 50]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from bench.common import bench_stack, percentiles, table, write_result
from services.query.app import create_app
from services.query.ranking.memories import SearchParams
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.db import create_pool
from shared.memory.writer import MEMORY_TYPES
from shared.settings import CommonSettings
from tests.support import running

TARGET_MS = 50.0
DIM = 384
TYPES = list(MEMORY_TYPES)
THEMES = [f"theme-{i}" for i in range(12)]
WORDS = (
    "garden coffee hiking Lisbon mortgage tennis Python report dentist jazz chess "
    "pottery yoga marathon sushi birthday invoice server deploy kids school"
).split()


class FixedVector:
    """An embedder that answers at once (the page's time, not a provider's)."""

    def __init__(self, vector: list[float]) -> None:
        self.vector = vector

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector for _ in texts]


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def load_user(
    pool: asyncpg.Pool, user_id: str, n: int, rng: np.random.Generator, *, rich: bool
) -> list[uuid.UUID]:
    now = datetime.now(UTC)
    await pool.execute(
        "INSERT INTO users (id, display_name) VALUES ($1, $2)", user_id, f"Bench {user_id}"
    )
    await pool.executemany(
        "INSERT INTO themes (user_id, slug, display_name) VALUES ($1, $2, $3)",
        [(user_id, t, t.title()) for t in THEMES],
    )
    people: list[uuid.UUID] = []
    if rich:
        people = [uuid.uuid4() for _ in range(50)]
        await pool.executemany(
            "INSERT INTO people (id, user_id, name, relation, aliases) VALUES ($1, $2, $3, $4, $5)",
            [(p, user_id, f"Person {i}", "friend", [f"P{i}"]) for i, p in enumerate(people)],
        )
    vectors = _unit(rng, n)
    ids = [uuid.uuid4() for _ in range(n)]
    records = []
    for i, item_id in enumerate(ids):
        r = random.random()
        state = "error" if r < 0.01 else "ready"
        words = " ".join(random.choices(WORDS, k=8))
        records.append(
            (
                item_id,
                user_id,
                THEMES[i % len(THEMES)],
                TYPES[i % len(TYPES)],
                f"Memory {i}: {words}",
                [random.choice(WORDS)],
                [people[i % len(people)]] if people and i % 7 == 0 else [],
                "conversation",
                round(random.random(), 2),
                "archived" if random.random() < 0.05 else "active",
                state,
                "HTTP 500: upstream failed" if state == "error" else None,
                vectors[i] if state == "ready" else None,
                now - timedelta(seconds=i),
            )
        )
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "memory_items",
            records=records,
            columns=[
                "id",
                "user_id",
                "theme",
                "type",
                "content",
                "tags",
                "subjects",
                "source",
                "confidence",
                "status",
                "embedding_state",
                "embedding_error",
                "embedding",
                "created_at",
            ],
        )
    superseded = ids[1 : n // 50 * 2 : 2]
    await pool.execute(
        "UPDATE memory_items m SET superseded_at = now(), superseded_by = s.by "
        "FROM unnest($2::uuid[], $3::uuid[]) AS s(id, by) WHERE m.user_id = $1 AND m.id = s.id",
        user_id,
        superseded,
        [ids[ids.index(s) - 1] for s in superseded],
    )
    if rich:
        summary = {
            "title": "Bench episode",
            "summary": "A summary.",
            "outcome": "resolved",
            "key_points": ["one", "two"],
            "topics": ["bench"],
        }
        await pool.executemany(
            "INSERT INTO episodes (id, user_id, provider, chat_id, status, started_at, "
            "last_active_at, summary, summary_text) VALUES ($1, $2, 'bench', 'c', 'closed', "
            "$3, $3, $4, 'Bench episode')",
            [(uuid.uuid4(), user_id, now - timedelta(hours=i), summary) for i in range(500)],
        )
        await pool.executemany(
            "INSERT INTO fact_reviews (user_id, content, confidence, reason) "
            "VALUES ($1, $2, 0.3, 'confidence below threshold')",
            [(user_id, f"maybe fact {i}") for i in range(200)],
        )
        await pool.execute(
            "INSERT INTO user_summaries (user_id, summary, fact_count) "
            "VALUES ($1, 'A bench user.', 80)",
            user_id,
        )
    return ids


async def run(settings: CommonSettings, args: argparse.Namespace) -> dict[str, Any]:
    assert settings.database_url is not None
    rng = np.random.default_rng(7)
    random.seed(7)
    pool = await create_pool(settings.database_url.get_secret_value(), max_size=4)
    try:
        started = time.perf_counter()
        big = "bench-big"
        ids = await load_user(pool, big, args.items, rng, rich=True)
        for i in range(20):
            await load_user(pool, f"bench-other-{i}", 500, rng, rich=False)
        await pool.execute("ANALYZE")
        load_s = time.perf_counter() - started
        _, secret = await create_key(pool, user_id=big)
        person = await pool.fetchval("SELECT id FROM people WHERE user_id = $1 LIMIT 1", big)
        error_item = await pool.fetchval(
            "SELECT id FROM memory_items WHERE user_id = $1 AND embedding_state = 'error' LIMIT 1",
            big,
        )
        mid = await pool.fetchrow(
            "SELECT created_at, id FROM memory_items WHERE user_id = $1 "
            "ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1",
            big,
            args.items // 2,
        )
        assert mid is not None
        deep = f"{mid['created_at'].isoformat()}_{mid['id']}"
    finally:
        await pool.close()

    qs = QuerySettings(**settings.model_dump())
    vector = [float(x) for x in _unit(rng, 1)[0]]

    async def resolver(pool: Any, user_id: str, settings: Any, **_: Any) -> FixedVector:
        return FixedVector(vector)

    pages = {
        "themes (/ui/)": "/ui/",
        "memories, first page": "/ui/memories",
        "memories, theme + type + archived": "/ui/memories?theme=theme-3&type=fact&archived=1",
        "memories, embedding errors": "/ui/memories?embedding=error&archived=1",
        "memories, page at item 5,000": "/ui/memories",  # with ?after= below
        "memories, archived switch (fragment)": "/ui/memories?archived=1",
        "memories, hybrid search": "/ui/memories?q=garden+coffee+Lisbon",
        "memory detail (error)": f"/ui/memories/{error_item}",
        "memory detail (superseded)": f"/ui/memories/{ids[1]}",
        "person's memories": f"/ui/memories?person={person}&archived=1",
        "people": "/ui/people",
        "episodes": "/ui/episodes",
        "reviews": "/ui/reviews",
        "summary": "/ui/summary",
        "settings": "/ui/settings",
    }
    results: dict[str, Any] = {}
    async with running(create_app(qs, resolver=resolver)) as client:
        await client.post("/ui/login", data={"key": secret})  # the session cookie
        for name, path in pages.items():
            params = {"after": deep} if "5,000" in name else None
            headers = {"HX-Request": "true"} if "fragment" in name else None
            samples = []
            for i in range(args.requests + 5):
                t0 = time.perf_counter()
                r = await client.get(path, params=params, headers=headers)
                dt = time.perf_counter() - t0
                if r.status_code != 200:
                    raise SystemExit(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
                if i >= 5:
                    samples.append(dt)
            results[name] = {"path": path, "bytes": len(r.content), **percentiles(samples)}
        # the hybrid search alone (services/query/ranking/memories.py), for comparison with its page
        app_state = client._transport.app.state  # type: ignore[attr-defined]
        params_ = SearchParams(
            query="garden coffee Lisbon", limit=50, status="active", include_superseded=True
        )
        samples = []
        for i in range(args.requests + 5):
            t0 = time.perf_counter()
            await app_state.query.search(app_state.runtime.pool, params_, user_id=big)
            if i >= 5:
                samples.append(time.perf_counter() - t0)
        results["(hybrid search call alone)"] = {"path": "-", "bytes": 0, **percentiles(samples)}
    return {
        "items": args.items,
        "other_users": 20,
        "load_seconds": round(load_s, 1),
        "requests_per_page": args.requests,
        "target_ms": TARGET_MS,
        "pages": results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    with bench_stack("browser") as settings:
        data = asyncio.run(run(settings, args))
    rows = [
        (
            name,
            f"{r['p50_ms']:.1f}",
            f"{r['p95_ms']:.1f}",
            f"{r['bytes']:,}",
            "ok" if r["p95_ms"] <= TARGET_MS else "SLOW",
        )
        for name, r in data["pages"].items()
    ]
    print(table(rows, ("page", "p50 ms", "p95 ms", "bytes", f"p95 <= {TARGET_MS:.0f} ms")))
    path = write_result("browser", data)
    print(f"wrote {path}")
    slow = [n for n, r in data["pages"].items() if r["p95_ms"] > TARGET_MS]
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
