"""Only users past the exact-scan limit have rows in the HNSW indexes."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from shared.embeddings import store, vector_index
from shared.embeddings.vector_index import Indexer
from tests.embedder.conftest import add_memories


def unit(i: int, dim: int = 384) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


async def embed(pool: asyncpg.Pool, user_id: str, ids: list[uuid.UUID]) -> None:
    await store.write_vectors(
        pool,
        user_id,
        "memory",
        provider="local",
        model="m",
        ids=ids,
        vectors=[unit(i) for i in range(len(ids))],
        native_dims=[384] * len(ids),
    )


async def marks(pool: asyncpg.Pool, user_id: str) -> list[bool]:
    return [
        r[0]
        for r in await pool.fetch(
            "SELECT vector_indexed FROM memory_items WHERE user_id = $1 ORDER BY content", user_id
        )
    ]


async def test_a_user_past_the_limit_is_listed_and_all_their_vectors_indexed(
    pool: asyncpg.Pool,
) -> None:
    big, small = f"big-{uuid.uuid4().hex[:8]}", f"small-{uuid.uuid4().hex[:8]}"
    big_ids = await add_memories(pool, big, [f"note {i}" for i in range(6)])
    small_ids = await add_memories(pool, small, ["one", "two"])
    await embed(pool, big, big_ids[:5])
    await embed(pool, small, small_ids)
    assert await marks(pool, big) == [False] * 6  # nobody is listed yet

    indexer = Indexer(min_rows=3, settle_s=0)
    indexer.note(big, "memory")
    indexer.note(small, "memory")
    assert await indexer.run(pool) == 1
    assert await vector_index.is_ready(pool, big, "memory")
    assert not await vector_index.is_ready(pool, small, "memory")
    # the 5 embedded rows are in the index; the pending one has no vector yet
    assert await marks(pool, big) == [True] * 5 + [False]
    assert await marks(pool, small) == [False, False]

    # from now on a vector written for the listed user goes straight into the index
    await embed(pool, big, big_ids[5:])
    assert await marks(pool, big) == [True] * 6
    # and the small user is not counted again before recheck_s
    indexer.note(small, "memory")
    assert await indexer.run(pool) == 0


async def test_a_user_who_crosses_the_limit_after_a_check_is_listed_once_it_has_passed(
    pool: asyncpg.Pool,
) -> None:
    # an import: checked while still small, then it crosses the limit and stops
    user = f"import-{uuid.uuid4().hex[:8]}"
    ids = await add_memories(pool, user, [f"note {i}" for i in range(6)])
    await embed(pool, user, ids[:2])
    indexer = Indexer(min_rows=3, recheck_s=0.3, settle_s=0)
    indexer.note(user, "memory")
    assert await indexer.run(pool) == 0  # 2 rows: small
    await embed(pool, user, ids[2:])
    indexer.note(user, "memory")  # inside the recheck window: not counted yet
    assert await indexer.run(pool) == 0
    await asyncio.sleep(0.35)
    # no more vectors arrive; the next run after the window still counts the user
    assert await indexer.run(pool) == 1
    assert await vector_index.is_ready(pool, user, "memory")


async def test_indexing_twice_or_after_an_interruption_is_harmless(pool: asyncpg.Pool) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    ids = await add_memories(pool, user, [f"note {i}" for i in range(7)])
    await embed(pool, user, ids)
    # a process listed the user and died before marking anything
    await pool.execute(vector_index.LIST, user, "memory")
    assert not await vector_index.is_ready(pool, user, "memory")
    indexer = Indexer(min_rows=100, settle_s=0)  # listed users are finished whatever their size
    indexer.note(user, "memory")
    assert await indexer.run(pool) == 1
    assert await marks(pool, user) == [True] * 7
    assert await vector_index.index_user(pool, user, "memory", batch=2, settle_s=0) == 0


async def test_the_hnsw_index_holds_only_listed_users_rows(pool: asyncpg.Pool) -> None:
    listed, other = f"l-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    a = await add_memories(pool, listed, ["a"])
    b = await add_memories(pool, other, ["b"])
    await pool.execute(vector_index.LIST, listed, "memory")
    await embed(pool, listed, a)
    await embed(pool, other, b)
    indexdef = await pool.fetchval(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_items_embedding_hnsw_idx'"
    )
    assert "hnsw" in indexdef and "WHERE vector_indexed" in indexdef
    assert await marks(pool, listed) == [True]
    assert await marks(pool, other) == [False]
