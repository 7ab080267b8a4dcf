"""Fact learning rules on the real database: limits, filters, dedupe bands, supersession."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from shared.llm.schemas import FactCandidate
from shared.memory.facts import FactResult, apply_plan, plan_facts
from shared.memory.writer import NewItem, insert_items
from tests.extractor.helpers import T0, facts_of

DIM = 384


def vec(similarity: float, axis: int = 1) -> list[float]:
    """A unit vector whose cosine similarity to e0 is ``similarity``."""
    v = [0.0] * DIM
    v[0] = similarity
    v[axis] = math.sqrt(max(0.0, 1 - similarity**2))
    return v


class TableEmbedder:
    """Vectors chosen by the test, so each similarity band can be hit exactly."""

    provider = "test"
    model = "table"

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.table.get(t, vec(0.0, axis=7)) for t in texts]


class SameFact:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, a: str, b: str) -> bool:
        self.asked.append((a, b))
        return self.answer


def fact(content: str, **kw: Any) -> FactCandidate:
    return FactCandidate.model_validate({"subject": "user", "content": content, **kw})


async def existing(
    pool: asyncpg.Pool,
    user_id: str,
    content: str,
    *,
    vector: list[float] | None = None,
    subjects: Sequence[uuid.UUID] = (),
) -> uuid.UUID:
    await pool.execute(
        "INSERT INTO users (id, display_name) VALUES ($1, 'Tim') ON CONFLICT DO NOTHING", user_id
    )
    async with pool.acquire() as conn:
        new = NewItem(type="fact", content=content, subjects=list(subjects))
        [written] = (await insert_items(conn, user_id, [new], actor="test")).items
    if vector:  # the state an embedded fact has, without running supersession here
        await pool.execute(
            "UPDATE memory_items SET embedding = $2, embedding_state = 'ready', "
            "embedding_provider = $3, embedding_model = $4 WHERE id = $1",
            written.id,
            vector,
            TableEmbedder.provider,
            TableEmbedder.model,
        )
    return written.id


async def learn(
    pool: asyncpg.Pool,
    user_id: str,
    candidates: list[FactCandidate],
    *,
    embedder: Any = None,
    same: Any = None,
    episode: bool = True,
    limit: int = 5,
) -> FactResult:
    await pool.execute(
        "INSERT INTO users (id, display_name) VALUES ($1, 'Tim') ON CONFLICT DO NOTHING", user_id
    )
    episode_id = None
    if episode:
        episode_id = uuid.uuid4()
        await pool.execute(
            """INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at)
               VALUES ($1, $2, 'test', 'c', $3, $3)""",
            episode_id,
            user_id,
            T0,
        )
    plan = await plan_facts(
        pool,
        user_id=user_id,
        candidates=candidates,
        occurred_at=T0,
        embedder=embedder,
        same_fact=same or SameFact(False),
        dim=DIM,
    )
    async with pool.acquire() as conn, conn.transaction():
        return await apply_plan(
            conn,
            plan,
            user_id=user_id,
            episode_id=episode_id,
            extractor_name="test",
            heuristic=False,
            limit=limit,
        )


async def reviews(pool: asyncpg.Pool, user_id: str) -> dict[str, str]:
    rows = await pool.fetch("SELECT content, reason FROM fact_reviews WHERE user_id = $1", user_id)
    return {r["content"]: r["reason"] for r in rows}


async def test_at_most_five_new_facts_per_episode(pool: asyncpg.Pool, user_id: str) -> None:
    candidates = [
        fact(f"Tim owns a {thing}.", confidence=0.9 - i * 0.01)
        for i, thing in enumerate(["bike", "car", "boat", "drone", "piano", "kayak", "tent"])
    ]
    result = await learn(pool, user_id, candidates)
    assert len(result.stored) == 5
    stored = {f["content"] for f in await facts_of(pool, user_id)}
    # the most confident five are kept, the rest wait for review
    assert stored == {f"Tim owns a {t}." for t in ["bike", "car", "boat", "drone", "piano"]}
    held = await reviews(pool, user_id)
    assert set(held) == {"Tim owns a kayak.", "Tim owns a tent."}
    assert all("limit of 5" in r for r in held.values())


async def test_low_confidence_goes_to_review_not_memory(pool: asyncpg.Pool, user_id: str) -> None:
    result = await learn(
        pool,
        user_id,
        [
            fact("Tim might like jazz.", confidence=0.5),
            fact("Tim lives in Silver Spring, MD.", confidence=0.6),
            fact("Tim works at Acme.", confidence=55),  # a 0-100 answer, read as 0.55
        ],
    )
    assert [f["content"] for f in await facts_of(pool, user_id)] == [
        "Tim lives in Silver Spring, MD."
    ]
    assert len(result.stored) == 1 and result.reviewed == 2
    held = await reviews(pool, user_id)
    assert "below 0.6" in held["Tim might like jazz."]
    assert "0.55" in held["Tim works at Acme."]


@pytest.mark.parametrize(
    "source,expected",
    [
        ("tool_call", 0.95),
        ("auto_discovery", 0.95),
        ("user_explicit", 0.90),
        ("conversation", 0.70),
    ],
)
async def test_confidence_comes_from_the_source_when_the_model_gives_none(
    pool: asyncpg.Pool, user_id: str, source: str, expected: float
) -> None:
    await learn(pool, user_id, [fact("Tim's timezone is US Eastern.", source=source)])
    [row] = await facts_of(pool, user_id)
    assert row["confidence"] == pytest.approx(expected)
    assert row["source"] == source


async def test_secrets_are_never_stored(pool: asyncpg.Pool, user_id: str) -> None:
    result = await learn(
        pool,
        user_id,
        [
            fact("Tim's GitHub PAT is ghp_abcdefghijklmnopqrstuvwxyz0123456789", confidence=0.95),
            fact("Tim's wifi password is hunter2", confidence=0.95),
            fact("Tim's card number is 4111 1111 1111 1111", confidence=0.95),
            fact("Tim's OpenAI key is sk-proj-abcdefghijklmnop1234567890", confidence=0.95),
            fact(
                "Tim uses GitHub for his projects.",
                confidence=0.9,
                source_context="here is my token: ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            ),
        ],
    )
    assert result.dropped == 4 and len(result.stored) == 1
    [row] = await facts_of(pool, user_id)
    assert row["content"] == "Tim uses GitHub for his projects."
    assert "ghp_" not in row["source_context"] and "[redacted]" in row["source_context"]
    assert await reviews(pool, user_id) == {}


async def test_what_the_assistant_said_is_not_a_user_fact(pool: asyncpg.Pool, user_id: str) -> None:
    await learn(pool, user_id, [fact("Tim loves hiking.", stated_by="assistant", confidence=0.9)])
    assert await facts_of(pool, user_id) == []
    assert "assistant" in (await reviews(pool, user_id))["Tim loves hiking."]


async def test_a_fact_about_a_friend_is_about_the_friend(pool: asyncpg.Pool, user_id: str) -> None:
    await learn(
        pool,
        user_id,
        [
            fact(
                "Sam is training for a marathon.",
                subject="my friend Sam",
                about="person",
                category="person",
                confidence=0.9,
            ),
            fact("Sam's birthday is on 3 June.", subject="Sam", about="person", confidence=0.9),
        ],
    )
    rows = await facts_of(pool, user_id)
    people = await pool.fetch("SELECT id, name, relation FROM people WHERE user_id = $1", user_id)
    assert [(p["name"], p["relation"]) for p in people] == [("Sam", "friend")]
    assert all(r["subjects"] == [people[0]["id"]] for r in rows)


async def test_relative_dates_are_resolved_against_the_episode(
    pool: asyncpg.Pool, user_id: str
) -> None:
    await learn(pool, user_id, [fact("Tim started a new job yesterday.", confidence=0.9)])
    [row] = await facts_of(pool, user_id)
    assert row["content"] == "Tim started a new job on 7 May 2023."


async def test_same_text_confirms_the_existing_fact_without_an_embedder(
    pool: asyncpg.Pool, user_id: str
) -> None:
    old = await existing(pool, user_id, "Tim prefers Celsius.")
    result = await learn(pool, user_id, [fact("Tim prefers Celsius.", confidence=0.9)])
    assert result.stored == [] and result.confirmed == [old]
    [row] = await facts_of(pool, user_id)
    assert row["last_verified_at"] is not None


async def test_above_090_confirms_without_asking(pool: asyncpg.Pool, user_id: str) -> None:
    old = await existing(pool, user_id, "Tim prefers Celsius.", vector=vec(1.0))
    same = SameFact(False)
    emb = TableEmbedder({"Tim likes temperatures in Celsius.": vec(0.93)})
    result = await learn(
        pool,
        user_id,
        [fact("Tim likes temperatures in Celsius.", confidence=0.9)],
        embedder=emb,
        same=same,
    )
    assert result.confirmed == [old] and result.stored == [] and same.asked == []
    assert len(await facts_of(pool, user_id)) == 1


@pytest.mark.parametrize("answer", [True, False])
async def test_between_080_and_090_the_model_decides(
    pool: asyncpg.Pool, user_id: str, answer: bool
) -> None:
    old = await existing(pool, user_id, "Tim prefers Celsius.", vector=vec(1.0))
    same = SameFact(answer)
    emb = TableEmbedder({"Tim uses metric units.": vec(0.85)})
    result = await learn(
        pool, user_id, [fact("Tim uses metric units.", confidence=0.9)], embedder=emb, same=same
    )
    assert same.asked == [("Tim uses metric units.", "Tim prefers Celsius.")]
    rows = {r["content"]: r for r in await facts_of(pool, user_id)}
    if answer:
        assert result.confirmed == [old] and result.stored == []
        assert len(rows) == 1
    else:
        # a different fact this close is a conflict: the new one supersedes the old (Ash)
        assert len(result.stored) == 1 and result.superseded == [old]
        assert rows["Tim prefers Celsius."]["superseded_by"] == result.stored[0]


async def test_below_080_stores_a_new_fact(pool: asyncpg.Pool, user_id: str) -> None:
    old = await existing(pool, user_id, "Tim prefers Celsius.", vector=vec(1.0))
    same = SameFact(True)
    emb = TableEmbedder({"Tim drinks his coffee black.": vec(0.3)})
    result = await learn(
        pool,
        user_id,
        [fact("Tim drinks his coffee black.", confidence=0.9)],
        embedder=emb,
        same=same,
    )
    assert same.asked == [] and len(result.stored) == 1 and result.superseded == []
    rows = {r["content"]: r for r in await facts_of(pool, user_id)}
    assert rows["Tim prefers Celsius."]["superseded_at"] is None
    assert old in {r["id"] for r in rows.values()}


async def test_supersession_at_075_only_for_the_same_subjects(
    pool: asyncpg.Pool, user_id: str
) -> None:
    await pool.execute("INSERT INTO users (id) VALUES ($1)", user_id)
    sarah = await pool.fetchval(
        "INSERT INTO people (user_id, name, relation) VALUES ($1, 'Sarah', 'wife') RETURNING id",
        user_id,
    )
    mine = await existing(pool, user_id, "Tim's favorite color is red.", vector=vec(1.0))
    hers = await existing(
        pool, user_id, "Sarah's favorite color is red.", vector=vec(1.0), subjects=[sarah]
    )
    emb = TableEmbedder({"Tim's favorite color is blue.": vec(0.77)})
    result = await learn(
        pool, user_id, [fact("Tim's favorite color is blue.", confidence=0.9)], embedder=emb
    )
    assert result.superseded == [mine]
    rows = {r["id"]: r for r in await facts_of(pool, user_id)}
    assert rows[mine]["superseded_by"] == result.stored[0]
    assert rows[hers]["superseded_at"] is None
    history = await pool.fetchval(
        "SELECT count(*) FROM audit_log WHERE user_id = $1 AND action = 'supersede'", user_id
    )
    assert history == 1


async def test_below_075_nothing_is_superseded(pool: asyncpg.Pool, user_id: str) -> None:
    await existing(pool, user_id, "Tim's favorite color is red.", vector=vec(1.0))
    emb = TableEmbedder({"Tim's favorite food is ramen.": vec(0.7)})
    result = await learn(
        pool, user_id, [fact("Tim's favorite food is ramen.", confidence=0.9)], embedder=emb
    )
    assert len(result.stored) == 1 and result.superseded == []


async def test_facts_of_other_users_are_never_compared(pool: asyncpg.Pool, user_id: str) -> None:
    other = f"other-{uuid.uuid4().hex[:8]}"
    theirs = await existing(pool, other, "Tim prefers Celsius.", vector=vec(1.0))
    emb = TableEmbedder({"Tim prefers Celsius.": vec(1.0)})
    result = await learn(
        pool, user_id, [fact("Tim prefers Celsius.", confidence=0.9)], embedder=emb
    )
    assert len(result.stored) == 1 and result.confirmed == [] and result.superseded == []
    [row] = await facts_of(pool, other)
    assert row["id"] == theirs and row["last_verified_at"] is None
