"""Learned facts and summaries a person would sign (issue 31.3), on real PostgreSQL:
every statement whole and attributed to the one who said it."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from services.extractor.service import Extraction, extract_episode
from services.ingest.service import store_turns
from shared.events import ExtractRequested, TurnReceived
from shared.llm.offline import OfflineExtractor, extract_facts, summarize, whole
from shared.llm.transcript import Line, Transcript
from shared.settings import CommonSettings
from shared.streams import Publisher
from tests.extractor.helpers import T0

SESSION = [
    ("Caroline", "Hey Mel! How have you been lately? I went to a support group yesterday."),
    (
        "Melanie",
        "Hi Caroline! BTW, recently I had a setback. Last month I got hurt and had to take a "
        "break from pottery, which I use for self-expression and peace.",
    ),
    ("Caroline", "Oh no, I'm sorry! Painting is a great outlet for expressing yourself."),
    (
        "Melanie",
        "Thanks. We were all freaked out when my son got into an accident last week. "
        "I'm feeling inspired by autumn so I'm planning a few.",
    ),
    (
        "Caroline",
        "I started volunteering at the shelter downtown on Tuesday evenings because helping "
        "people who are going through a hard time gives me a sense of purpose and I really "
        "want to keep doing it for a long while yet, maybe for years.",
    ),
    ("Melanie", "I ran a charity race for mental health last Saturday with my running club."),
    ("Caroline", "I love hiking in the mountains near my hometown every summer."),
]
SPEAKERS = ("Melanie", "Caroline")


def transcript() -> Transcript:
    role = {"Caroline": "user", "Melanie": "assistant"}
    return Transcript([Line(role[s], s, t) for s, t in SESSION], "Caroline")


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if s]


def check_signed(summary: str, key_points: list[str], facts: list[str]) -> None:
    intro, *said = sentences(summary)  # "Caroline and Melanie talked about ...": both did
    assert intro.startswith("Caroline and Melanie talked about")
    for text in [intro, *said, *key_points, *facts]:
        assert whole(text), text
        assert "…" not in text, text
        # "pottery, which Melanie uses for peace" is whole; "Melanie uses for peace" is not
        assert not re.search(r"(?<!which )Melanie uses for", text), text
    for text in [*said, *key_points, *facts]:
        # "we" is Melanie's family, not the two of them
        assert not re.match(r"(?:Melanie and Caroline|Caroline and Melanie)\b", text), text
        assert "expressing Melanie" not in text and "expressing Caroline" not in text, text
    for fact in facts:
        assert any(s in fact for s in SPEAKERS), fact


def test_the_offline_summary_and_facts_are_whole_and_attributed() -> None:
    s = summarize(transcript())
    facts = [f.content for f in extract_facts(transcript())]
    check_signed(s.summary, s.key_points, facts)
    assert "Melanie ran a charity race for mental health last Saturday" in s.summary
    assert "Last month Melanie got hurt and had to take a break from pottery." in facts
    # the long sentence is left out whole, never cut
    assert "volunteering" not in s.summary


def test_a_statement_that_leans_on_what_was_said_before_is_no_fact() -> None:
    """ "Joanna is a huge fan of it": what "it" is was said before, so the statement
    alone says nothing a person would sign; a sentence naming its thing is a fact."""
    session = [
        ("Joanna", "I watched it too and it really spoke to me last night."),
        ("Nate", "I like holding them every morning before work."),
        ("Joanna", "I found out recently that she is allergic to cats as well."),
        ("Nate", "I adopted two turtles from the shelter downtown last week."),
    ]
    role = {"Joanna": "user", "Nate": "assistant"}
    facts = [
        f.content
        for f in extract_facts(Transcript([Line(role[s], s, t) for s, t in session], "Joanna"))
    ]
    assert facts == ["Last week Nate adopted two turtles from the shelter downtown."] or facts == [
        "Nate adopted two turtles from the shelter downtown last week."
    ], facts


def test_whole() -> None:
    assert whole("Melanie is planning a trip.")
    assert not whole("Melanie is planning a few.")
    assert not whole("Melanie likes the…")
    assert whole("Caroline's friends motivate her.")


async def test_stored_facts_and_summary_are_whole_and_attributed(
    pool: asyncpg.Pool, redis: aioredis.Redis, settings: CommonSettings, user_id: str
) -> None:
    events = [
        TurnReceived(
            user_id=user_id,
            display_name=speaker,
            provider="test",
            chat_id="c1",
            role="user" if speaker == "Caroline" else "assistant",  # type: ignore[arg-type]
            content=text,
            occurred_at=T0 + timedelta(seconds=30 * i),
        )
        for i, (speaker, text) in enumerate(SESSION)
    ]
    publisher = Publisher(redis, settings)
    stored = await store_turns(pool, publisher, events, stale_window=timedelta(minutes=30))
    assert not stored.refused

    async def no_embedder(user: str) -> Any:
        return None

    x = Extraction(
        pool=pool,
        publisher=publisher,
        extractor=OfflineExtractor(),
        embedder_for=no_embedder,
        dim=settings.embedding_dim,
    )
    episode = await pool.fetchval("SELECT id FROM episodes WHERE user_id = $1", user_id)
    await extract_episode(x, ExtractRequested(episode_id=episode, user_id=user_id, reason="manual"))
    row = await pool.fetchrow("SELECT summary FROM episodes WHERE id = $1", episode)
    facts = [
        r["content"]
        for r in await pool.fetch(
            "SELECT content FROM memory_items WHERE user_id = $1 AND type IN ('fact', "
            "'preference')",
            user_id,
        )
    ]
    reviewed = [
        r["content"]
        for r in await pool.fetch("SELECT content FROM fact_reviews WHERE user_id = $1", user_id)
    ]
    assert facts
    check_signed(row["summary"]["summary"], row["summary"]["key_points"], facts + reviewed)
