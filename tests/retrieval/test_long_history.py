"""A long history's search on real PostgreSQL (docs/retrieval.md, "Long history"): the
walk of a candidate's neighbours reads the episode index alone (migration 0196), and
a neighbour's length, read afterwards for all the neighbours at once
(``with_neighbour_lengths``), comes from ``message_shapes`` or, without its row, from
the turn."""

from __future__ import annotations

from typing import Any

import asyncpg

from services.query.ranking.turns import EXACT, with_neighbour_lengths
from tests.retrieval.helpers import T, add_turns

TURNS = [
    T("the budget review moves to friday", speaker="Ann"),
    T("noted: the budget review is on friday now", speaker="Bot", role="assistant"),
    T("what about the launch?", speaker="Ann"),
    T("the launch stays in march", speaker="Bot", role="assistant"),
    T("and the pottery class", speaker="Ann"),
    T("pottery class is on tuesday", speaker="Bot", role="assistant"),
    T("thanks, budget settled", speaker="Ann"),
]
NEAR = ("before_ids", "before_ats", "before_whos", "before_lens", "after_ids", "after_ats")
NEAR += ("after_whos", "after_lens")


def _args(user_id: str, query: str, reach: int) -> list[Any]:
    # as turns._candidates gives them: no vector, no filters, 100 candidates,
    # ``reach`` turns read on each side, no periods
    return [user_id, query, None, None, None, None, None, 100, reach, [], [], False]


async def _rows(pool: asyncpg.Pool, user_id: str, query: str) -> dict[int, tuple[Any, ...]]:
    rows = await pool.fetch(EXACT["bm25"], *_args(user_id, query, 3))
    rows = await with_neighbour_lengths(pool, user_id, rows)
    return {r["id"]: tuple(r[k] for k in NEAR) for r in rows}


async def test_the_episode_index_covers_the_neighbour_walk(pool: asyncpg.Pool) -> None:
    definition = await pool.fetchval(
        "SELECT pg_get_indexdef('messages_episode_order_idx'::regclass)"
    )
    assert "(episode_id, occurred_at, id)" in definition
    assert "INCLUDE (user_id, chat_id, role, display_name)" in definition
    # every partition has it (migration 0170: indexes are per partition)
    leaves = await pool.fetchval(
        "SELECT count(*) FROM pg_partition_tree('messages_episode_order_idx'::regclass) "
        "WHERE isleaf"
    )
    assert leaves == 16


async def test_the_neighbours_are_read_from_the_index_alone(
    pool: asyncpg.Pool, user_id: str
) -> None:
    # another episode of the user's at the same times, as a real history has: on seven
    # turns alone the planner may walk the (user_id, occurred_at) index instead, its
    # cost the same there
    await add_turns(pool, user_id, [T(f"unrelated note {n}") for n in range(200)])
    await add_turns(pool, user_id, TURNS)
    await pool.execute("VACUUM (ANALYZE) messages")  # the pages all-visible
    async with pool.acquire() as conn, conn.transaction():
        # a few turns in a test database: the planner must be kept off the
        # sequential scans it would pick for them
        await conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN (ANALYZE, COSTS OFF) " + EXACT["bm25"], *_args(user_id, "budget", 3)
            )
        )
    walks = [line for line in plan.splitlines() if "episode_id_occurred_at_id" in line]
    assert len(walks) == 2, plan  # before and after
    assert all("Index Only Scan" in line for line in walks), plan


async def test_a_neighbour_without_its_shape_gets_the_turns_own_length(
    pool: asyncpg.Pool, user_id: str
) -> None:
    _, ids = await add_turns(pool, user_id, TURNS)
    with_shapes = await _rows(pool, user_id, "budget launch")
    assert with_shapes and any(r[3] for r in with_shapes.values())
    await pool.execute(
        "DELETE FROM message_shapes WHERE user_id = $1 AND message_id = ANY($2::bigint[])",
        user_id,
        ids[1::2],
    )
    assert await _rows(pool, user_id, "budget launch") == with_shapes
    lengths = dict(
        await pool.fetch("SELECT id, length(fts) FROM messages WHERE user_id = $1", user_id)
    )
    for before_ids, _, _, before_lens, after_ids, _, _, after_lens in with_shapes.values():
        ids_read = [*(before_ids or ()), *(after_ids or ())]
        for i, n in zip(ids_read, [*(before_lens or ()), *(after_lens or ())], strict=True):
            assert n == lengths[i]
