"""bench/scale: how search, context and ingest cost grow with the number of turns.

    python -m bench.scale --series one  --sizes 10000,100000,1000000
    python -m bench.scale --series many --totals 1000000,5000000
    python -m bench.scale ... --layouts single      # only the unpartitioned tables

Each layout (``single``: every migration but 0170, the tables unpartitioned;
``partitioned``: hash partitions by user, migration 0170, and every other migration)
gets its own embedded PostgreSQL, filled with the
same rows; every measurement alternates between them query by query, so both see the
same machine load (one Redis takes ingest's publishes). ``--migrate`` applies 0170 at the
end to the single-table database as it stands and times it (the pause an existing
deployment of that size takes). Every measurement records the load average beside it.
Two series:

- ``one``: users of growing size, added one per step (``--sizes`` 10k, 100k, 1M: the
  10k user alone, then with a 100k user, then with a 1M user); every user present is
  measured at each step, so a user's own size and the table around it are both seen;
- ``many``: turns over many users grow through ``--totals`` (1M, 5M) at a fixed
  per-user size: 90% of the turns belong to "regular" users of 2,000 turns (searched
  exactly, below the HNSW limit of ``vector_index.MIN_ROWS``) and 10% to "heavy"
  users of 20,000 turns (searched through the HNSW index). The same two probe users
  (one regular, one heavy, both present from the first total) are measured at every
  total, so only the table around them grows.

Fill (the fast path, not ingest): turns are COPYed with every secondary index of
``messages`` dropped, then the indexes are built again (``maintenance_work_mem``
2 GB, one parallel worker; the databases build at the same time); one episode per
50 turns. Text: 8-24 words from a Zipf-Mandelbrot vocabulary of 50,000 words;
vectors: 384-d unit vectors around 256 random centres (noise 0.6), stored ``ready``
and, for a user past the HNSW limit, ``vector_indexed`` with the user listed in
``vector_index_users`` and ``message_postings_users`` (the state the embedder
leaves: only such a user's BM25 postings are kept, migration 0198, and their common
words are counted, migration 0200). The fill runs with autovacuum off and VACUUMs
every table it wrote once done, as autovacuum would after so many inserts. Memories are not filled
(context's memory side reads an empty table).

Measured at every point, each at concurrency 1 after a warm-up:
- ``search``: ``search_messages`` (what ``POST /v1/messages/search`` runs after
  embedding the query; mode ``fused``: BM25 + vector + neighbours) with a given
  query vector;
- ``context``: ``assemble_auto`` (``POST /v1/context``, policy ``auto``) with a
  given query vector;
- ``ingest``: ``store_turns`` (the ingest consumer's write, one transaction per
  batch of 50 turns, embeddings requested on Redis) for the probe users: turns/s
  into the table at that size, indexes in place;
- disk: table and index sizes (``pg_total_relation_size`` over the partitions),
  per million turns; memory: the indexes a search walks (what must stay cached).

Progress goes to stdout; results to ``bench/results/scale-<series>.json`` (``--out``),
rewritten after every step. ``--hold`` keeps the filled databases up at the end (their
URLs printed) until interrupted, so a variant can be measured on them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
from pydantic import SecretStr

from bench.common import percentiles, share_model_cache, write_result
from engram_cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from services.ingest.service import store_turns
from services.query.context.auto import assemble_auto
from services.query.context.command import ContextQuery
from services.query.embeddings.query import QueryVector
from services.query.ranking.turns import MessageQuery, search_messages
from shared.db import create_pool
from shared.embeddings import vector_index
from shared.events import TurnReceived
from shared.migrate import MIGRATIONS_DIR, migrate
from shared.redis_client import connect_redis
from shared.runtime import settle_heap
from shared.settings import CommonSettings
from shared.streams import Publisher

DIM = 384
TURNS_PER_EPISODE = 50
PARTITIONED_FROM = 170  # first migration of the partitioned layout (0170)
PARTITIONED = any(MIGRATIONS_DIR.glob("0170_*.sql"))
REGULAR, HEAVY = 2_000, 20_000
HEAVY_SHARE = 0.1
MODEL = "synthetic"
BATCH = 20_000
MAINTENANCE_MEM = "2GB"


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


def load() -> float:
    """The 1-minute load average: noted beside every number (2 shared cores)."""
    return round(os.getloadavg()[0], 1)


class Synth:
    """Synthetic turns: Zipf-Mandelbrot words, vectors clustered around 256 centres."""

    def __init__(self, seed: int = 11) -> None:
        self.rng = np.random.default_rng(seed)
        self.vocab = np.array([f"w{i}" for i in range(50_000)], dtype=object)
        weights = 1.0 / (np.arange(1, len(self.vocab) + 1) + 50)
        self.cdf = np.cumsum(weights / weights.sum())
        self.centres = self.rng.standard_normal((256, DIM)).astype(np.float32)

    def words(self, n: int) -> np.ndarray:
        idx = np.searchsorted(self.cdf, self.rng.random(n))
        return np.asarray(self.vocab[np.minimum(idx, len(self.vocab) - 1)])

    def texts(self, n: int) -> list[str]:
        lengths = self.rng.integers(8, 25, n)
        flat = self.words(int(lengths.sum()))
        out, at = [], 0
        for k in lengths:
            out.append(" ".join(flat[at : at + k]))
            at += k
        return out

    def vectors(self, n: int) -> np.ndarray:
        c = self.centres[self.rng.integers(0, len(self.centres), n)]
        v = c + 0.6 * self.rng.standard_normal((n, DIM)).astype(np.float32)
        out: np.ndarray = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
        return out

    def query(self) -> tuple[str, list[float]]:
        return " ".join(self.words(3)), [float(x) for x in self.vectors(1)[0]]


@dataclass
class UserState:
    turns: int = 0
    episode: uuid.UUID | None = None


@dataclass
class Db:
    """One database under test: a layout and its pool."""

    layout: str
    pool: asyncpg.Pool
    url: str


@dataclass
class Data:
    """The users and their turns so far: the same in every database."""

    users: dict[str, UserState] = field(default_factory=dict)
    base: datetime = datetime(2024, 1, 1, tzinfo=UTC)


MESSAGE_COLUMNS = [
    "event_id",
    "user_id",
    "episode_id",
    "provider",
    "chat_id",
    "role",
    "content",
    "occurred_at",
    "embedding",
    "embedding_state",
    "embedding_provider",
    "embedding_model",
    "embedding_dims",
    "embedded_at",
    "vector_indexed",
]
EPISODE_COLUMNS = [
    "id",
    "user_id",
    "provider",
    "chat_id",
    "status",
    "started_at",
    "last_active_at",
    "closed_at",
    "turn_count",
]


async def secondary_indexes(conn: Any) -> list[tuple[str, str]]:
    """(name, definition) of the indexes of ``messages`` no constraint owns."""
    rows = await conn.fetch(
        """
        SELECT i.relname AS name, pg_get_indexdef(i.oid) AS def
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
        WHERE x.indrelid = 'messages'::regclass
          AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid)
        ORDER BY i.relname
        """
    )
    # a partitioned index reads "ON ONLY messages": built again, it must reach every partition
    return [(r["name"], r["def"].replace(" ON ONLY ", " ON ", 1)) for r in rows]


async def build_indexes(db: Db, conn: Any, indexes: list[tuple[str, str]]) -> dict[str, float]:
    await conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_MEM}'")
    await conn.execute("SET max_parallel_maintenance_workers = 1")
    builds: dict[str, float] = {}
    for name, ddl in indexes:
        t = time.perf_counter()
        log(f"  [{db.layout}] building {name} ...")
        task = asyncio.create_task(conn.execute(ddl))
        shown = t
        while not task.done():
            await asyncio.sleep(0.2)
            if not task.done() and time.perf_counter() - shown >= 30:
                shown = time.perf_counter()
                p = await db.pool.fetchrow(
                    "SELECT phase, tuples_done, tuples_total, partitions_done, "
                    "partitions_total FROM pg_stat_progress_create_index"
                )
                if p:
                    log(
                        f"    {p['phase']}: tuples {p['tuples_done']:,}/{p['tuples_total']:,}"
                        f" partitions {p['partitions_done']}/{p['partitions_total']}"
                        f" ({shown - t:.0f}s)"
                    )
        await task
        builds[name] = round(time.perf_counter() - t, 1)
    return builds


async def fill(dbs: list[Db], data: Data, plan: dict[str, int], synth: Synth) -> dict[str, Any]:
    """Grow each user of ``plan`` to its number of turns in every database: COPY with
    the secondary indexes of ``messages`` dropped, then build them again."""
    adds = {u: n - data.users.get(u, UserState()).turns for u, n in plan.items()}
    adds = {u: n for u, n in adds.items() if n > 0}
    total = sum(adds.values())
    new = [u for u in adds if u not in data.users]
    for u in new:
        data.users[u] = UserState()
    listed = [u for u, n in plan.items() if n > vector_index.MIN_ROWS]
    conns = [await db.pool.acquire() for db in dbs]
    indexes: list[list[tuple[str, str]]] = []
    for conn in conns:
        if new:
            await conn.copy_records_to_table("users", records=[(u,) for u in new], columns=["id"])
        await conn.execute(
            "INSERT INTO vector_index_users (user_id, kind, ready) "
            "SELECT unnest($1::text[]), 'message', true ON CONFLICT DO NOTHING",
            listed,
        )
        # ... and their BM25 postings kept (migration 0198), written as they are copied
        await conn.execute(
            "INSERT INTO message_postings_users (user_id, ready) "
            "SELECT unnest($1::text[]), true ON CONFLICT DO NOTHING",
            listed,
        )
        ix = await secondary_indexes(conn)
        for name, _ in ix:
            await conn.execute(f'DROP INDEX "{name}"')
        indexes.append(ix)
    log(f"  copying {total:,} turns for {len(adds):,} users (indexes dropped) ...")
    copy_s = [0.0] * len(dbs)
    started = shown = time.perf_counter()
    done = 0
    messages: list[tuple[Any, ...]] = []
    episodes: list[tuple[Any, ...]] = []

    async def flush() -> None:
        nonlocal messages, episodes, done, shown
        for i, conn in enumerate(conns):
            t = time.perf_counter()
            if episodes:
                await conn.copy_records_to_table(
                    "episodes", records=episodes, columns=EPISODE_COLUMNS
                )
            await conn.copy_records_to_table("messages", records=messages, columns=MESSAGE_COLUMNS)
            copy_s[i] += time.perf_counter() - t
        done += len(messages)
        messages, episodes = [], []
        now = time.perf_counter()
        if now - shown >= 15 or done == total:
            shown = now
            log(f"    {done:,}/{total:,} turns ({done / (now - started):,.0f}/s)")

    for user, n in adds.items():
        st = data.users[user]
        indexed = plan[user] > vector_index.MIN_ROWS
        left = n
        while left:
            take = min(left, BATCH - len(messages))
            texts, vecs = synth.texts(take), synth.vectors(take)
            for j in range(take):
                k = st.turns
                at = data.base + timedelta(minutes=k)
                chat = f"chat-{(k // TURNS_PER_EPISODE) % 20}"
                if k % TURNS_PER_EPISODE == 0:
                    st.episode = uuid.uuid4()
                    episodes.append(
                        (
                            st.episode,
                            user,
                            "bench",
                            chat,
                            "closed",
                            at,
                            at + timedelta(minutes=TURNS_PER_EPISODE - 1),
                            at + timedelta(minutes=TURNS_PER_EPISODE),
                            TURNS_PER_EPISODE,
                        )
                    )
                messages.append(
                    (
                        uuid.uuid4(),
                        user,
                        st.episode,
                        "bench",
                        chat,
                        "user" if k % 2 == 0 else "assistant",
                        texts[j],
                        at,
                        vecs[j],
                        "ready",
                        "local",
                        MODEL,
                        DIM,
                        at,
                        indexed,
                    )
                )
                st.turns += 1
            left -= take
            if len(messages) >= BATCH:
                await flush()
    if messages:
        await flush()
    out: dict[str, Any] = {"turns_added": total}

    async def finish(i: int, db: Db, conn: Any) -> None:
        builds = await build_indexes(db, conn, indexes[i])
        log(f"  [{db.layout}] VACUUM ANALYZE ...")
        t = time.perf_counter()
        # what autovacuum (off during the fill) would do after so many inserts: with
        # it, the tables the triggers filled have their visibility maps set, so a
        # search's index-only scans of postings and shapes fetch no heap page
        for table in VACUUMED:
            await conn.execute(f"VACUUM ANALYZE {table}")
        out[db.layout] = {
            "copy_s": round(copy_s[i], 1),
            "copy_rows_per_s": round(total / copy_s[i]) if copy_s[i] else None,
            "index_build_s": builds,
            "index_build_total_s": round(sum(builds.values()), 1),
            "vacuum_analyze_s": round(time.perf_counter() - t, 1),
        }
        # ... and the common words of the users past the limit counted (migration 0200),
        # as the embedder counts them once a user grows by a tenth
        t = time.perf_counter()
        words = [await vector_index.count_words(conn, u, settle_s=0) for u in listed]
        out[db.layout] |= {
            "words_counted": sum(words),
            "count_words_s": round(time.perf_counter() - t, 1),
        }
        log(f"  [{db.layout}] filled: {out[db.layout]}")
        await db.pool.release(conn)

    # the databases build their indexes at the same time (one server each)
    await asyncio.gather(
        *(finish(i, db, c) for i, (db, c) in enumerate(zip(dbs, conns, strict=True)))
    )
    return out


SIZES = """
WITH parts AS (
    SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
    UNION SELECT $1::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = $1::regclass) = 'r'
)
SELECT coalesce(sum(pg_table_size(relid)), 0) AS heap,
       coalesce(sum(pg_indexes_size(relid)), 0) AS indexes
FROM parts
"""
# a partition's index counts under its partitioned parent index's name
INDEX_SIZES = """
SELECT coalesce(pg_partition_root(x.indexrelid), x.indexrelid)::regclass::text AS name,
       sum(pg_relation_size(x.indexrelid)) AS bytes
FROM (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
      UNION SELECT $1::regclass) AS t
JOIN pg_index x ON x.indrelid = t.relid
GROUP BY 1 ORDER BY 1
"""


async def sizes(pool: asyncpg.Pool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in (
        "messages",
        "episodes",
        "message_text_stats",
        "message_postings",
        "message_shapes",
    ):
        r = await pool.fetchrow(SIZES, table)
        assert r is not None
        out[table] = {
            "heap_mb": round(float(r["heap"]) / 2**20, 1),
            "index_mb": round(float(r["indexes"]) / 2**20, 1),
        }
    out["messages_indexes_mb"] = {
        r["name"]: round(int(r["bytes"]) / 2**20, 1)
        for r in await pool.fetch(INDEX_SIZES, "messages")
    }
    out["database_mb"] = round(
        int(await pool.fetchval("SELECT pg_database_size(current_database())")) / 2**20, 1
    )
    return out


async def measure_reads(
    dbs: list[Db], user: str, synth: Synth, n: int
) -> dict[str, dict[str, Any]]:
    """Search and context for ``user`` in every database, interleaved query by query
    (the order of the databases alternates), so the machine's load falls on each alike."""
    queries = [synth.query() for _ in range(n)]
    settle_heap()  # as a started service does (shared/runtime.py)
    load_before = load()
    search_s: dict[str, list[float]] = {db.layout: [] for db in dbs}
    context_s: dict[str, list[float]] = {db.layout: [] for db in dbs}
    hits: dict[str, list[int]] = {db.layout: [] for db in dbs}
    for i, (text, vec) in enumerate(queries[:20] + queries):
        warm = i < 20
        for db in dbs if i % 2 == 0 else dbs[::-1]:
            t = time.perf_counter()
            got = await search_messages(db.pool, MessageQuery(query=text), user_id=user, vector=vec)
            if not warm:
                search_s[db.layout].append(time.perf_counter() - t)
                hits[db.layout].append(len(got.hits))
    for i, (text, vec) in enumerate(queries[: max(25, n // 2)]):
        qv = QueryVector(vector=vec, model=MODEL, warning=None)
        for db in dbs if i % 2 == 0 else dbs[::-1]:
            t = time.perf_counter()
            await assemble_auto(db.pool, user, ContextQuery(message=text), qv)
            if i >= 5:
                context_s[db.layout].append(time.perf_counter() - t)
    return {
        db.layout: {
            "search": {k: round(v, 2) for k, v in percentiles(search_s[db.layout]).items()},
            "search_fewest_hits": min(hits[db.layout]),
            "context": {k: round(v, 2) for k, v in percentiles(context_s[db.layout]).items()},
            "load_avg": [load_before, load()],
        }
        for db in dbs
    }


async def measure_ingest(
    dbs: list[Db], publisher: Publisher, data: Data, users: list[str], synth: Synth, turns: int
) -> dict[str, dict[str, Any]]:
    """``store_turns`` batches of 50 turns of ``users`` (new chats, so new episodes),
    the same batches in every database, alternating."""
    texts = synth.texts(turns)
    now = datetime.now(UTC)
    batches = []
    for b in range(0, turns, 50):
        batch = []
        for j in range(b, min(turns, b + 50)):
            u = users[j % len(users)]
            batch.append(
                TurnReceived(
                    user_id=u,
                    provider="bench-ingest",
                    chat_id=f"live-{(j // 10) % 20}",
                    role="user" if j % 2 == 0 else "assistant",
                    content=texts[j],
                    occurred_at=now + timedelta(milliseconds=j),
                )
            )
        batches.append(batch)
    window = timedelta(hours=1)
    load_before = load()
    per_batch: dict[str, list[float]] = {db.layout: [] for db in dbs}
    for i, batch in enumerate(batches):
        for db in dbs if i % 2 == 0 else dbs[::-1]:
            t = time.perf_counter()
            await store_turns(db.pool, publisher, batch, stale_window=window)
            if i > 0:
                per_batch[db.layout].append(time.perf_counter() - t)
    for batch in batches:
        for ev in batch:
            data.users[ev.user_id].turns += 1
    n = sum(len(b) for b in batches[1:])
    out = {}
    for db in dbs:
        p = percentiles(per_batch[db.layout])
        out[db.layout] = {
            "turns": n,
            "turns_per_s": round(n / sum(per_batch[db.layout]), 1),
            "batch_p50_ms": round(p["p50_ms"], 1),
            "batch_p95_ms": round(p["p95_ms"], 1),
            "load_avg": [load_before, load()],
        }
    return out


def migrations_for(layout: str, tmp: Path) -> Path:
    if layout == "partitioned":
        return MIGRATIONS_DIR
    d = tmp / "migrations-single"
    d.mkdir(exist_ok=True)
    # every migration but the partitioning one: the later ones (BM25 postings, turn
    # shapes, the covering walk index) are what today's search statements read
    for f in MIGRATIONS_DIR.glob("*.sql"):
        if int(f.stem.split("_", 1)[0]) != PARTITIONED_FROM:
            shutil.copy(f, d / f.name)
    return d


# every table the fill writes (messages' triggers write the last three)
VACUUMED = ("messages", "episodes", "message_postings", "message_shapes", "message_text_stats")


async def open_db(layout: str, pg: EmbeddedPostgres, tmp: Path) -> Db:
    url = pg.start()
    conn = await asyncpg.connect(url)
    applied = await migrate(conn, embedding_dim=DIM, directory=migrations_for(layout, tmp))
    partitioned = await conn.fetchval(
        "SELECT relkind = 'p' FROM pg_class WHERE oid = 'messages'::regclass"
    )
    if layout == "single" and PARTITIONED:
        # with 0170, ingest's conflict targets name the user: give the old tables the
        # unique keys they name (two small btrees; messages itself is as before)
        await conn.execute(
            "CREATE UNIQUE INDEX ON episodes (user_id, id);"
            "CREATE UNIQUE INDEX ON episode_closes (user_id, event_id)"
        )
    await conn.close()
    log(f"layout {layout}: {len(applied)} migrations, messages partitioned: {partitioned}")
    if partitioned != (layout == "partitioned"):
        raise SystemExit(f"layout {layout}, but messages partitioned is {partitioned}")
    return Db(layout, await create_pool(url, min_size=2, max_size=6), url)


COUNTS = "SELECT (SELECT count(*) FROM messages) AS m, (SELECT count(*) FROM episodes) AS e"


async def migrate_in_place(db: Db, tmp: Path) -> dict[str, Any]:
    """Migration 0170 on the single-table database as it stands: the pause an existing
    deployment of this size takes (every write and read of the three tables waits)."""
    before = await db.pool.fetchrow(COUNTS)
    assert before is not None
    log(f"  [single] applying 0170 to {before['m']:,} turns, {before['e']:,} episodes ...")
    await db.pool.execute(
        "DROP INDEX IF EXISTS episodes_user_id_id_idx; "
        "DROP INDEX IF EXISTS episode_closes_user_id_event_id_idx"
    )
    conn = await db.pool.acquire()
    try:
        await conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_MEM}'")
        load_before = load()
        t = time.perf_counter()
        applied = await migrate(conn, embedding_dim=DIM, directory=MIGRATIONS_DIR)
        took = time.perf_counter() - t
    finally:
        await db.pool.release(conn)
    after = await db.pool.fetchrow(COUNTS)
    assert after is not None
    parts = await db.pool.fetchval(
        "SELECT count(*) FROM pg_partition_tree('messages'::regclass) WHERE isleaf"
    )
    out = {
        "applied": applied,
        "seconds": round(took, 1),
        "turns": before["m"],
        "episodes": before["e"],
        "rows_kept": before["m"] == after["m"] and before["e"] == after["e"],
        "messages_partitions": parts,
        "load_avg": [load_before, load()],
    }
    log(f"  [single] migrated: {out}")
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="engram-scale-", dir=args.tmp))
    share_model_cache(tmp)
    pgs = {
        layout: EmbeddedPostgres(
            tmp / f"pg-{layout}",
            delete_on_exit=True,
            config={
                "shared_buffers": args.shared_buffers,
                "max_wal_size": "8GB",
                "checkpoint_timeout": "30min",
                "autovacuum": "off",  # the fill VACUUM ANALYZEs itself: no passes mid-run
            },
        )
        for layout in args.layouts
    }
    rd = EmbeddedRedis(tmp / "redis", port=free_port())
    try:
        dbs = [await open_db(layout, pg, tmp) for layout, pg in pgs.items()]
        settings = CommonSettings().model_copy(
            update={
                "redis_url": SecretStr(rd.start(persistent=False)),
                "stream_prefix": f"scale{uuid.uuid4().hex[:6]}:",
            }
        )
        redis = connect_redis(settings)
        publisher = Publisher(redis, settings)
        data = Data()
        synth = Synth()
        points: list[dict[str, Any]] = []
        steps: list[tuple[dict[str, int], list[str], int]] = []
        if args.series == "one":
            plan: dict[str, int] = {}
            for n in args.sizes:
                plan = plan | {f"solo-{n}": n}
                steps.append((dict(plan), list(plan), sum(plan.values())))
        else:
            for total in args.totals:
                heavy = int(total * HEAVY_SHARE) // HEAVY
                regular = (total - heavy * HEAVY) // REGULAR
                plan = {f"r{i:05d}": REGULAR for i in range(regular)}
                plan |= {f"h{i:04d}": HEAVY for i in range(heavy)}
                steps.append((plan, ["r00000", "h0000"], total))
        for plan, probes, total in steps:
            log(f"== {args.series}: {total:,} turns ({len(plan):,} users)")
            point: dict[str, Any] = {"total_turns": total, "users": len(plan)}
            point["fill"] = await fill(dbs, data, plan, synth)
            point["probes"] = {}
            for user in probes:
                log(f"  measuring {user} ({data.users[user].turns:,} turns) ...")
                got = await measure_reads(dbs, user, synth, args.n)
                point["probes"][user] = {"turns": data.users[user].turns} | got
                for layout, r in got.items():
                    log(
                        f"    [{layout}] search p50 {r['search']['p50_ms']} p95 "
                        f"{r['search']['p95_ms']} ms, context p50 {r['context']['p50_ms']} "
                        f"p95 {r['context']['p95_ms']} ms (load {r['load_avg']})"
                    )
            point["ingest"] = await measure_ingest(dbs, publisher, data, probes, synth, args.ingest)
            log(f"    ingest {point['ingest']}")
            point["sizes"] = {}
            for db in dbs:
                sz = await sizes(db.pool)
                m = sz["messages"]
                per_m = 1e6 / total
                sz["per_million_turns"] = {
                    "messages_mb": round((m["heap_mb"] + m["index_mb"]) * per_m, 1),
                    "messages_heap_mb": round(m["heap_mb"] * per_m, 1),
                    "messages_index_mb": round(m["index_mb"] * per_m, 1),
                }
                point["sizes"][db.layout] = sz
                log(f"    [{db.layout}] sizes {sz}")
            points.append(point)
            write_result(args.out, _report(args, points))
        if args.migrate and "single" in args.layouts and PARTITIONED:
            single = next(db for db in dbs if db.layout == "single")
            report = _report(args, points)
            report["migration_0170"] = await migrate_in_place(single, tmp)
            write_result(args.out, report)
            points_report = report
        else:
            points_report = _report(args, points)
        await redis.aclose()
        for db in dbs:
            await db.pool.close()
        if args.hold:
            await hold(dbs)
        return points_report
    finally:
        rd.stop()
        for pg in pgs.values():
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def hold(dbs: list[Db]) -> None:
    """Keep the filled databases up until interrupted (``--hold``): what a run filled
    for half an hour can then be studied (EXPLAIN, a variant of a statement) before
    the servers stop and their directory is deleted."""
    for db in dbs:
        log(f"  [{db.layout}] holding: {db.url}")
    log("  holding the databases until interrupted (Ctrl-C or SIGTERM)")
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()


def _report(args: argparse.Namespace, points: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "benchmark": "scale",
        "series": args.series,
        "layouts": args.layouts,
        "data": {
            "text": "synthetic: 8-24 words, Zipf-Mandelbrot over 50,000 words",
            "vectors": "synthetic: 384-d unit vectors around 256 random centres, noise 0.6",
            "episodes": f"one per {TURNS_PER_EPISODE} turns, 20 chats per user",
            "mix": (
                "one user only"
                if args.series == "one"
                else f"{1 - HEAVY_SHARE:.0%} of turns in users of {REGULAR:,} (exact scan), "
                f"{HEAVY_SHARE:.0%} in users of {HEAVY:,} (HNSW)"
            ),
            "memories": "none (memory_items empty)",
        },
        "settings": {"shared_buffers": args.shared_buffers, "queries": args.n},
        "machine_note": "2 cores shared with other work: latencies are noisy upper bounds",
        "points": points,
    }


def main() -> None:
    global MAINTENANCE_MEM
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", choices=("one", "many"), default="one")
    parser.add_argument(
        "--layouts",
        type=lambda s: s.split(","),
        default=["single", "partitioned"] if PARTITIONED else ["single"],
        help="single (migrations before 0170), partitioned (all), or both, side by side",
    )
    parser.add_argument("--out", default=None, help="result name (bench/results/NAME.json)")
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100_000]
    )
    parser.add_argument(
        "--totals", type=lambda s: [int(x) for x in s.split(",")], default=[1_000_000]
    )
    parser.add_argument("--n", type=int, default=200, help="searches per point")
    parser.add_argument("--ingest", type=int, default=1_000, help="turns stored per point")
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument(
        "--migrate", action="store_true", help="at the end, time migration 0170 on single"
    )
    parser.add_argument("--tmp", default=None, help="where the databases live")
    parser.add_argument("--maintenance-mem", default=MAINTENANCE_MEM, help="for index builds")
    parser.add_argument(
        "--hold",
        action="store_true",
        help="after the last step, keep the databases up (URLs printed) until interrupted",
    )
    args = parser.parse_args()
    args.out = args.out or f"scale-{args.series}"
    MAINTENANCE_MEM = args.maintenance_mem
    random.seed(1)
    # a SIGTERM ends the run through its finally blocks: the servers stop with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
