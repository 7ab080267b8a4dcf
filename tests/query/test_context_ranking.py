"""What ``/v1/context`` (auto) gives an agent, on real PostgreSQL: the turn that
answers the question gets in within budget, however old; unrelated memories never
push it out; Ash's 0.3 floor and top-N rules still hold (docs/context.md)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from services.query.context.auto import MIN_MESSAGES, assemble_auto, turn_hits
from services.query.context.command import ContextQuery
from services.query.embeddings.query import QueryVector
from tests.query.helpers import unit
from tests.retrieval.helpers import T, add_turns

Q = unit(1)
MODEL = "ctx-model"
QUESTION = "What breed of dog did Mia adopt?"
EVIDENCE = "My sister Mia adopted a retired greyhound called Biscuit from the shelter"
NOW = datetime.now(UTC)

FILLER = [
    "We talked about the weather and the traffic on the way to work",
    "I finished the book club novel, the ending was a surprise",
    "The new coffee place downtown makes a good flat white",
    "Work was busy, three meetings back to back this afternoon",
    "Planning to repaint the kitchen cabinets next weekend",
]


def qv() -> QueryVector:
    return QueryVector(Q, MODEL, None)


async def _history(pool, user_id, *, months: int = 12, per_month: int = 40) -> int:
    """A year of everyday turns, one episode a month, with the evidence 9 months ago."""
    evidence_id = -1
    for m in range(months):
        at = NOW - timedelta(days=30 * (months - m))
        turns = [
            T(
                f"{FILLER[i % len(FILLER)]} ({m}-{i})",
                unit(1000 + 100 * m + i),
                at=at + timedelta(minutes=i),
            )
            for i in range(per_month)
        ]
        if m == 3:  # nine months ago, among the rest of that day's turns
            turns[17] = T(EVIDENCE, unit(7, near=Q, noise=0.6), at=at + timedelta(minutes=17))
        _, ids = await add_turns(pool, user_id, turns)
        if m == 3:
            evidence_id = ids[17]
    return evidence_id


async def _memories(pool, user_id, texts: list[str], vectors: list[list[float]]) -> None:
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    for i, (text, vec) in enumerate(zip(texts, vectors, strict=True)):
        await pool.execute(
            "INSERT INTO memory_items (user_id, type, content, embedding, embedding_state, "
            "embedding_model, created_at) VALUES ($1, 'fact', $2, $3, 'ready', $4, "
            "now() - make_interval(secs => $5))",
            user_id,
            text,
            np.asarray(vec, dtype=np.float32),
            MODEL,
            float(i),
        )


async def test_a_turn_from_nine_months_ago_answers_within_the_budget(pool, user_id):
    evidence_id = await _history(pool, user_id)
    out = await assemble_auto(
        pool, user_id, ContextQuery(message=QUESTION, token_budget=1000), qv()
    )
    assert out.tokens <= 1000
    assert EVIDENCE in out.text
    [line] = [ln for ln in out.text.splitlines() if EVIDENCE in ln]
    # its own date (nine months ago, a few minutes into its episode: past midnight when
    # the test runs late in the day)
    said = (
        await pool.fetchval("SELECT occurred_at FROM messages WHERE id = $1", evidence_id)
    ).date()
    assert said in ((NOW - timedelta(days=270)).date(), (NOW - timedelta(days=269)).date())
    assert line.startswith(f"- [{said.isoformat()}, user]")  # with its date and role
    assert out.sections["messages"][0]["id"] == evidence_id
    # and at a budget too small for much else
    small = await assemble_auto(
        pool, user_id, ContextQuery(message=QUESTION, token_budget=120), qv()
    )
    assert small.tokens <= 120 and EVIDENCE in small.text


async def test_unrelated_memories_never_push_the_relevant_turn_out(pool, user_id):
    evidence_id = await _history(pool, user_id, months=4, per_month=20)
    # 30 long, newest-first, unrelated memories: Ash's top N takes 10 of them whatever
    # their similarity, and before this change they were laid out and paid first
    noise = [
        f"User's note {i}: " + "the quarterly budget spreadsheet needs another review " * 6
        for i in range(30)
    ]
    await _memories(pool, user_id, noise, [unit(500 + i) for i in range(30)])
    for budget in (150, 300, 1000):
        out = await assemble_auto(
            pool, user_id, ContextQuery(message=QUESTION, token_budget=budget), qv()
        )
        assert out.tokens <= budget
        assert EVIDENCE in out.text, budget
        assert out.sections["messages"][0]["id"] == evidence_id
        assert all(not m["relevant"] for m in out.sections["memories"])
    # a relevant memory is read before the weak ones, after the turn hits
    await _memories(pool, user_id, ["Mia's dog Biscuit is a greyhound"], [unit(8, near=Q)])
    out = await assemble_auto(pool, user_id, ContextQuery(message=QUESTION, token_budget=300), qv())
    assert EVIDENCE in out.text and "Biscuit is a greyhound" in out.text
    assert out.sections["memories"][0]["relevant"] is True


async def test_ash_s_floor_and_top_n_still_hold(pool, user_id):
    near = [
        T(f"Dog walk number {i} with Biscuit", unit(40 + i, near=Q, noise=0.5)) for i in range(40)
    ]
    far = [T("Completely unrelated words about taxes", unit(90))]
    await add_turns(pool, user_id, far)
    await add_turns(pool, user_id, near)
    out = await assemble_auto(
        pool,
        user_id,
        ContextQuery(message="When did I walk Mia's dog?", token_budget=100_000),
        qv(),
    )
    hits = [m for m in out.sections["messages"] if m["neighbour_of"] is None]
    # top N: one hit per 60 tokens of budget, 10 to 30
    assert len(hits) == turn_hits(100_000) == 30
    assert "taxes" not in out.text  # cosine under 0.3 and no shared word: never
    for m in hits:
        assert m["similarity"] is not None and m["similarity"] >= 0.3
    small = await assemble_auto(
        pool, user_id, ContextQuery(message="When did I walk Mia's dog?", token_budget=300), qv()
    )
    assert len([m for m in small.sections["messages"] if m["neighbour_of"] is None]) <= (
        MIN_MESSAGES
    )


async def test_a_short_hit_brings_its_neighbours(pool, user_id):
    ep = uuid.uuid4()
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("Did Mia ever get a dog in the end?", unit(60)),
            T("Yes, Biscuit!", unit(61, near=Q, noise=0.3)),
            T("A greyhound, retired from racing", unit(62)),
        ],
        episode=ep,
    )
    out = await assemble_auto(pool, user_id, ContextQuery(message=QUESTION, token_budget=500), qv())
    by_id = {m["id"]: m for m in out.sections["messages"]}
    # the short hit, then the turn after it under it; the question before it is a
    # hit of its own (it shares "Mia" and "dog"), so it is not repeated
    assert by_id[ids[1]]["neighbour_of"] is None
    assert by_id[ids[2]]["neighbour_of"] == ids[1]
    assert by_id[ids[0]]["neighbour_of"] is None
    assert out.text.index("Yes, Biscuit!") < out.text.index("  - [")
    assert [m["id"] for m in out.sections["messages"]].count(ids[0]) == 1


async def test_a_big_users_context_finds_a_turn_by_its_words(pool, user_id):
    # a heavy user (listed for the HNSW index, as the embedder does past 5,000 turns)
    # whose evidence turn is far from the question by meaning (under Ash's 0.3): only
    # its words find it. Until the ninth session a big user's context turns were
    # read by meaning alone, and this turn was never handed to the agent.
    from shared.embeddings import vector_index

    await _history(pool, user_id, months=4, per_month=30)
    _, [far] = await add_turns(
        pool, user_id, [T("Biscuit the greyhound came home from the shelter", unit(9000))]
    )
    await vector_index.index_user(pool, user_id, "message", settle_s=0)
    assert await vector_index.is_ready(pool, user_id, "message")
    out = await assemble_auto(
        pool, user_id, ContextQuery(message="Where did Biscuit the greyhound come from?"), qv()
    )
    assert far in {int(m["id"]) for m in out.sections["messages"]}
