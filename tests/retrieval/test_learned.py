"""What was learned from a turn lifts the turn (``RankSpec.w_learned``).

The extractor states what a turn said as a sentence that stands on its own (names
resolved, one fact), and keeps the turn it came from (``source_message_id``). A
question close to that sentence lifts the turn it came from, by the best such
cosine over the floor, as recall reads the memories: live now, or valid at the
time the search reads as of. Measured on both tuning sets, both halves
(docs/retrieval.md, "What was learned from a turn"). On real PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg

from services.query.ranking.fusion import FUSED, RankSpec
from services.query.ranking.turns import rank_turns
from tests.query.helpers import unit
from tests.retrieval.helpers import T, add_turns, learn

Q = unit(1)
FAR = unit(7)


async def _learn(pool: asyncpg.Pool, user_id: str, turn: int, text: str) -> uuid.UUID:
    return await learn(pool, user_id, turn, text, Q)


async def _order(
    pool: asyncpg.Pool, user_id: str, spec: RankSpec = FUSED, **kw: object
) -> list[int]:
    hits = await rank_turns(
        pool, spec, user_id=user_id, query="the garden plans", vector=Q, limit=5, **kw
    )
    return [h.id for h in hits]


UNLEARNED = FUSED.but(w_learned=0.0)


async def test_a_turn_whose_learned_fact_matches_the_question_outranks_its_twin(
    pool: asyncpg.Pool, user_id: str
) -> None:
    """Two turns alike in words and meaning; the newer ranks first on its own. The
    older one's learned fact is the question's meaning: it comes first. Superseded,
    the fact lifts it no more now, but still as of a time it was valid."""
    said = "we went over the garden plans again this morning"
    _, [older, newer] = await add_turns(pool, user_id, [T(said, FAR), T(said, FAR)])
    assert await _order(pool, user_id) == [newer, older]
    assert await _order(pool, user_id) == await _order(pool, user_id, UNLEARNED)

    fact = await _learn(pool, user_id, older, "Ann plans a vegetable garden")
    assert await _order(pool, user_id) == [older, newer]
    assert await _order(pool, user_id, UNLEARNED) == [newer, older]

    # replaced on June 1: not what holds now, still what held in May
    await pool.execute(
        "UPDATE memory_items SET superseded_at = now(), valid_to = $3 "
        "WHERE user_id = $1 AND id = $2",
        user_id,
        fact,
        datetime(2024, 6, 1, tzinfo=UTC),
    )
    assert await _order(pool, user_id) == [newer, older]
    assert await _order(pool, user_id, as_of=datetime(2024, 5, 15, tzinfo=UTC)) == [older, newer]
    assert await _order(pool, user_id, as_of=datetime(2024, 6, 15, tzinfo=UTC)) == [newer, older]


async def test_another_users_learned_fact_lifts_nothing(pool: asyncpg.Pool, user_id: str) -> None:
    """The same words, turns and fact under another user: this user's order is its own."""
    said = "we went over the garden plans again this morning"
    _, [older, newer] = await add_turns(pool, user_id, [T(said, FAR), T(said, FAR)])
    other = f"other-{uuid.uuid4().hex[:8]}"
    _, [theirs, _] = await add_turns(pool, other, [T(said, FAR), T(said, FAR)])
    await _learn(pool, other, theirs, "Ann plans a vegetable garden")
    assert await _order(pool, user_id) == [newer, older]
    assert (await _order(pool, other))[0] == theirs
