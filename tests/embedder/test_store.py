"""Many users' rows in one read and one write: each row only ever as its owner's."""

from __future__ import annotations

import uuid

import asyncpg

from shared.embeddings import store
from tests.embedder.conftest import add_memories, add_messages


def unit(i: int, dim: int = 384) -> list[float]:
    v = [0.0] * dim
    v[i] = 1.0
    return v


async def test_one_read_and_one_write_serve_many_users(pool: asyncpg.Pool) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    [ma] = await add_messages(pool, a, ["from a"])
    [mb] = await add_messages(pool, b, ["from b"])
    got = await store.fetch_pending_many(pool, "message", [(a, ma), (b, mb)], max_chars=100)
    assert sorted((owner, row.id) for owner, row in got) == sorted([(a, ma), (b, mb)])
    assert {row.text.split(": ", 1)[1] for _, row in got} == {"from a", "from b"}

    written = await store.write_vectors_many(
        pool,
        "message",
        provider="local",
        model="m",
        owners=[a, b],
        ids=[ma, mb],
        vectors=[unit(0), unit(1)],
        native_dims=[384, 384],
    )
    assert sorted(written) == sorted([(a, ma), (b, mb)])
    rows = {
        r["id"]: r
        for r in await pool.fetch(
            "SELECT id, embedding, embedding_state FROM messages WHERE id = ANY($1)", [ma, mb]
        )
    }
    assert rows[ma]["embedding"].to_list().index(1.0) == 0
    assert rows[mb]["embedding"].to_list().index(1.0) == 1
    assert {r["embedding_state"] for r in rows.values()} == {"ready"}


async def test_a_row_asked_for_under_another_owner_is_neither_read_nor_written(
    pool: asyncpg.Pool,
) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    [ma] = await add_messages(pool, a, ["a's secret"])
    [mem_a] = await add_memories(pool, a, ["a's memory"])
    await add_messages(pool, b, ["b's turn"])
    assert await store.fetch_pending_many(pool, "message", [(b, ma)], max_chars=100) == []
    assert await store.fetch_pending_many(pool, "memory", [(b, mem_a)], max_chars=100) == []
    written = await store.write_vectors_many(
        pool,
        "message",
        provider="local",
        model="m",
        owners=[b],
        ids=[ma],
        vectors=[unit(0)],
        native_dims=[384],
    )
    assert written == []
    state = await pool.fetchval("SELECT embedding_state FROM messages WHERE id = $1", ma)
    assert state == "pending"


def _removed_by_join_filters(plan: dict) -> int:
    """Rows a plan's join filters threw away, summed over every node."""
    own = int(plan.get("Rows Removed by Join Filter", 0))
    return own + sum(_removed_by_join_filters(p) for p in plan.get("Plans", []))


async def test_a_large_read_after_a_burst_finds_rows_by_key_not_by_comparing_pairs(
    pool: asyncpg.Pool,
) -> None:
    """Statistics taken before a burst say almost no row is pending. A read of
    thousands of (owner, id) pairs must still join them by key: with the state test
    in the join, the planner scanned the table and compared each pending row with
    every pair (3,000 rows: 9 million comparisons, 300 ms). Which join wins is a close
    call with this table's size, so hash and merge joins are turned off here: the
    state test must not be able to make a nested loop compare pairs."""
    user = f"burst-{uuid.uuid4().hex[:8]}"
    ids = await add_messages(pool, user, [f"turn {i}" for i in range(4000)])
    await pool.execute("UPDATE messages SET embedding_state = 'ready' WHERE user_id = $1", user)
    await pool.execute("ANALYZE messages")
    burst = ids[:3000]
    await pool.execute(
        "UPDATE messages SET embedding_state = 'pending' WHERE id = ANY($1::bigint[])", burst
    )
    pairs = [(user, i) for i in burst]
    got = await store.fetch_pending_many(pool, "message", pairs, max_chars=100)
    assert sorted(row.id for _, row in got) == sorted(burst)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off")
        [plan] = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + store.SQL["message"]["fetch"],
            [user] * len(burst),
            burst,
        )
    assert _removed_by_join_filters(plan["Plan"]) < 10 * len(burst)
