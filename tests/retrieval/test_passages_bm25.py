"""BM25 over a long turn's passages on real PostgreSQL (``RankSpec.lexical_passages``,
migrations 0160-0161, 0180): the per-user statistics and the postings follow every
passage write and removal, the statement a big user's search runs ranks as the full scan does, and a
long turn scores its best passage's, found once."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from services.query.ranking.turns import EXACT
from shared.embeddings import store, vector_index
from shared.embeddings.passages import split
from tests.query.helpers import unit
from tests.retrieval.helpers import T, add_turns, postings

STATS = """
SELECT speaker, turns, lexemes, long_turns, long_lexemes, passages, passage_lexemes
FROM message_text_stats WHERE user_id = $1 AND turns > 0
"""
COUNTED = """
SELECT coalesce(m.display_name, '') AS speaker, count(*) AS turns,
       sum(length(m.fts)) AS lexemes,
       count(*) FILTER (WHERE p.n IS NOT NULL) AS long_turns,
       coalesce(sum(length(m.fts)) FILTER (WHERE p.n IS NOT NULL), 0) AS long_lexemes,
       coalesce(sum(p.n), 0) AS passages, coalesce(sum(p.lexemes), 0) AS passage_lexemes
FROM messages m
     LEFT JOIN (SELECT message_id, count(*) AS n, sum(length(fts)) AS lexemes
                FROM message_passages GROUP BY 1) AS p ON p.message_id = m.id
WHERE m.user_id = $1 GROUP BY 1
"""

FILLER = (
    "The release checklist covers the changelog, the version bump and the tag. "
    "Then the packages are built for each platform and signed before upload. "
)
UMBRELLA = "Bring an umbrella: the forecast says heavy rain and weather alerts. "
LONG_WEATHER = FILLER * 6 + UMBRELLA + FILLER * 6
LONG_POTTERY = FILLER * 4 + "The pottery class moved to Thursday evenings. " + FILLER * 8
TURNS = [
    T("the weather was nice today", speaker="Ann"),
    T(LONG_WEATHER, speaker="Bob", role="assistant"),
    T("weather again and again, the weather", speaker="Bob", role="assistant"),
    T("I signed up for a pottery class with Bob", speaker="Ann"),
    T(LONG_POTTERY, speaker="Bob", role="assistant"),
    T("nothing to see here", speaker="Ann"),
]


async def _write_passages(pool: asyncpg.Pool, user_id: str, ids: list[int]) -> None:
    """What the embedder writes with each long turn's own vector."""
    rows = await pool.fetch("SELECT id, content FROM messages WHERE id = ANY($1)", ids)
    async with pool.acquire() as conn, conn.transaction():
        await store.write_passages(
            conn,
            [(user_id, r["id"]) for r in rows],
            {(user_id, r["id"]): [(p, unit(p.idx + 1)) for p in split(r["content"])] for r in rows},
        )


async def _stats(pool: asyncpg.Pool, user_id: str, sql: str) -> dict[str, tuple[int, ...]]:
    return {r["speaker"]: tuple(r)[1:] for r in await pool.fetch(sql, user_id)}


async def _lexical(pool: asyncpg.Pool, name: str, user_id: str, query: str) -> dict[int, float]:
    args: list[Any] = [user_id, query, None, None, None, None, None, 100, 0, [], [], False]
    rows = await pool.fetch(EXACT[name], *args)
    return {r["id"]: r["rank"] for r in rows if r["rank"] is not None}


async def test_passage_statistics_follow_writes_rewrites_deletes_and_erasure(
    pool: asyncpg.Pool, user_id: str
) -> None:
    _, ids = await add_turns(pool, user_id, TURNS)
    await vector_index.index_user(pool, user_id, "message", settle_s=0)  # postings kept
    await _write_passages(pool, user_id, ids)
    counted = await _stats(pool, user_id, COUNTED)
    assert await _stats(pool, user_id, STATS) == counted
    assert counted["Bob"][2] == 2 and counted["Bob"][4] == len(split(LONG_WEATHER)) + len(
        split(LONG_POTTERY)
    )
    kept = await postings(pool, user_id)
    assert kept == await postings(pool, user_id, from_scratch=True)
    # a long turn has its own postings and its passages'
    assert {p for _, i, p, *_ in kept if i == ids[1]} == {-1, *range(len(split(LONG_WEATHER)))}
    await _write_passages(pool, user_id, ids)  # a rewrite replaces them
    assert await _stats(pool, user_id, STATS) == counted
    assert await postings(pool, user_id) == kept
    await pool.execute("DELETE FROM message_passages WHERE message_id = $1", ids[4])
    assert await postings(pool, user_id) == await postings(pool, user_id, from_scratch=True)
    assert {p for _, i, p, *_ in await postings(pool, user_id) if i == ids[4]} == {-1}
    for query in ("pottery Thursday", "release checklist"):  # the turn read whole again
        full = await _lexical(pool, "bm25_passages", user_id, query)
        read = await _lexical(pool, "bm25_stats_passages", user_id, query)
        assert ids[4] in read and set(read) <= set(full), query
        assert all(abs(r - full[i]) < 1e-9 for i, r in read.items()), query
    await _write_passages(pool, user_id, [ids[4]])
    assert await postings(pool, user_id) == kept
    await pool.execute("DELETE FROM messages WHERE id = $1", ids[1])  # cascades to passages
    counted = await _stats(pool, user_id, COUNTED)
    assert await _stats(pool, user_id, STATS) == counted and counted["Bob"][2] == 1
    kept = await postings(pool, user_id)
    assert kept == await postings(pool, user_id, from_scratch=True)
    assert not {i for _, i, *_ in kept} & {ids[1]}
    await pool.execute("DELETE FROM users WHERE id = $1", user_id)
    assert await pool.fetch("SELECT 1 FROM message_text_stats WHERE user_id = $1", user_id) == []
    assert await postings(pool, user_id) == set()


async def test_a_long_turn_scores_its_best_passage_and_the_big_users_statement_agrees(
    pool: asyncpg.Pool, user_id: str
) -> None:
    _, ids = await add_turns(pool, user_id, TURNS)
    await _write_passages(pool, user_id, ids)
    await add_turns(pool, f"user-{uuid.uuid4().hex[:12]}", [T("pottery weather")] * 20)
    for query in ("weather pottery", "umbrella rain", "pottery Thursday", "Bob release", "zebra"):
        full = await _lexical(pool, "bm25_passages", user_id, query)
        read = await _lexical(pool, "bm25_stats_passages", user_id, query)
        assert set(read) <= set(full), query
        for i, rank in read.items():
            assert abs(rank - full[i]) < 1e-9, (query, i, rank, full[i])
    # the long turn's umbrella passage is a short document: it outranks the whole
    # turn read as one long document, and the turn is found once
    whole = await _lexical(pool, "bm25", user_id, "umbrella forecast rain")
    parts = await _lexical(pool, "bm25_passages", user_id, "umbrella forecast rain")
    assert list(parts) == [ids[1]] and parts[ids[1]] > whole[ids[1]]
    # a turn without passages is read as before
    same = await _lexical(pool, "bm25_passages", user_id, "nothing to see")
    assert list(same) == [ids[5]]
