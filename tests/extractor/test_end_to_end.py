"""Publish a conversation through ingest, close it, find its summary and facts (offline path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg

from services.extractor.app import create_app as extractor_app
from services.extractor.settings import ExtractorSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.events import EpisodeClosed, ExtractRequested
from shared.streams import Publisher
from tests.extractor.helpers import episodes_of, facts_of, stream_events, turns
from tests.support import running, wait_for

CONVERSATION = [
    ("user", "Hi! What's the weather in Silver Spring, MD today?"),
    ("assistant", "It is 22 degrees and sunny in Silver Spring."),
    ("user", "Great. I prefer Celsius, by the way. My wife Sarah loves Italian food."),
    ("assistant", "Noted! Anything else?"),
    (
        "user",
        "Remember that I have a dentist appointment tomorrow. My token is "
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789.",
    ),
    ("assistant", "You love hiking, I believe."),
]


async def test_a_closed_conversation_gets_a_summary_and_facts(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    ingest = make_settings(IngestSettings)
    settings = make_settings(
        ExtractorSettings, stream_prefix=ingest.stream_prefix, sweep_interval_s=3600
    )
    publisher = Publisher(redis, ingest)
    async with running(ingest_app(ingest)), running(extractor_app(settings)) as client:
        await publisher.publish("turns", turns(user_id, CONVERSATION))
        await wait_for(lambda: _turns_stored(pool, user_id, len(CONVERSATION)))
        await publisher.publish(
            "episodes", [EpisodeClosed(user_id=user_id, provider="test", chat_id="c1")]
        )

        async def extracted() -> Any:
            eps = await episodes_of(pool, user_id)
            return eps if eps and eps[0]["extracted_at"] else None

        [ep] = await wait_for(extracted, message="episode extracted")

        async def counted() -> bool:
            m = (await client.get("/metrics")).text
            # >= 1: the sweeper's first run may also extract other tests' idle episodes
            # (the database is shared by the session)
            return any(
                line.startswith('engram_extract_episodes_total{outcome="extracted"}')
                and float(line.rsplit(" ", 1)[1]) >= 1
                for line in m.splitlines()
            )

        await wait_for(counted, message="extraction counted")

    s = ep["summary"]
    assert set(s) >= {"title", "summary", "key_points", "outcome", "topics"}
    assert s["method"] == "heuristic" and s["turns"] == 6
    assert "Silver Spring" in s["title"] and s["key_points"]
    assert ep["embedding_state"] == "pending" and "Silver Spring" in ep["summary_text"]
    assert ep["extraction_error"] is None

    facts = await facts_of(pool, user_id)
    contents = {f["content"]: f for f in facts}
    assert "Tim prefers Celsius." in contents
    # relative date resolved against the episode's own time (8 May 2023)
    assert "Tim has a dentist appointment on 9 May 2023." in contents
    # about the wife, not the user
    wife = contents["Sarah (Tim's wife) loves Italian food."]
    person = await pool.fetchrow(
        "SELECT name, relation FROM people WHERE id = $1", wife["subjects"][0]
    )
    assert (person["name"], person["relation"]) == ("Sarah", "wife")
    assert contents["Tim prefers Celsius."]["subjects"] == []
    # what the assistant said is not learned; the token is never stored anywhere
    assert not any("hiking" in c for c in contents)
    assert not any("ghp_" in (f["content"] + (f["source_context"] or "")) for f in facts)
    reviews = await pool.fetch("SELECT content FROM fact_reviews WHERE user_id = $1", user_id)
    assert not any("ghp_" in r["content"] for r in reviews)
    # The vectors computed for dedupe are stored: the facts are ready at once.
    assert all(f["embedding_state"] == "ready" and f["data"]["heuristic"] for f in facts)
    assert all(f["episode_id"] == ep["id"] for f in facts)

    narrative = await pool.fetchval(
        "SELECT summary FROM user_summaries WHERE user_id = $1", user_id
    )
    assert "Tim prefers Celsius." in narrative

    embeds = await stream_events(redis, settings.stream("embed"))
    targets = {(t["kind"], t["id"]) for e in embeds for t in e["targets"]}
    assert ("episode", str(ep["id"])) in targets
    assert not {("memory", str(f["id"])) for f in facts} & targets


async def test_extracting_again_without_new_turns_changes_nothing(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    ingest = make_settings(IngestSettings)
    settings = make_settings(
        ExtractorSettings, stream_prefix=ingest.stream_prefix, sweep_interval_s=3600
    )
    publisher = Publisher(redis, ingest)
    async with running(ingest_app(ingest)), running(extractor_app(settings)) as client:
        await publisher.publish("turns", turns(user_id, CONVERSATION[:3]))
        await wait_for(lambda: _turns_stored(pool, user_id, 3))
        await publisher.publish(
            "episodes", [EpisodeClosed(user_id=user_id, provider="test", chat_id="c1")]
        )
        first = await wait_for(lambda: _extracted(pool, user_id))
        # the narrative is rebuilt just after the extraction commits
        await wait_for(
            lambda: pool.fetchval("SELECT 1 FROM user_summaries WHERE user_id = $1", user_id),
            message="narrative",
        )
        before = await _snapshot(pool, user_id)
        # the same episode asked for twice more (a redelivery and a fresh request)
        await publisher.publish(
            "extract",
            [
                ExtractRequested(episode_id=first["id"], user_id=user_id),
                ExtractRequested(episode_id=first["id"], user_id=user_id, reason="stale"),
            ],
        )

        async def skipped() -> bool:
            m = (await client.get("/metrics")).text
            return 'engram_extract_episodes_total{outcome="up_to_date"}' in m

        await wait_for(skipped, message="second request skipped")
        assert await _snapshot(pool, user_id) == before


async def test_an_episode_closed_again_with_nothing_new_stops_waiting_for_extraction(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    """Issue 29.12: a second close of an extracted episode (a platform's close after the
    stale sweep's, a redelivery) flags it due again; the extractor finds nothing new
    (``up_to_date``) and clears the flag, so the backlog gauge returns to 0 instead of
    counting the episode for good (the sweep never asks again for what is not due)."""
    ingest = make_settings(IngestSettings)
    settings = make_settings(
        ExtractorSettings, stream_prefix=ingest.stream_prefix, sweep_interval_s=3600
    )
    publisher = Publisher(redis, ingest)
    async with running(ingest_app(ingest)), running(extractor_app(settings)) as client:
        await publisher.publish("turns", turns(user_id, CONVERSATION[:3]))
        await wait_for(lambda: _turns_stored(pool, user_id, 3))
        close = EpisodeClosed(user_id=user_id, provider="test", chat_id="c1")
        await publisher.publish("episodes", [close])
        first = await wait_for(lambda: _extracted(pool, user_id))
        again = EpisodeClosed(
            episode_id=first["id"], user_id=user_id, provider="test", chat_id="c1"
        )
        await publisher.publish("episodes", [again])

        async def skipped() -> bool:
            m = (await client.get("/metrics")).text
            return 'engram_extract_episodes_total{outcome="up_to_date"}' in m

        await wait_for(skipped, message="the second request found nothing new")
        due = await pool.fetchval("SELECT extract_due FROM episodes WHERE id = $1", first["id"])
        assert due is False


async def test_a_request_for_another_users_episode_is_dead_lettered(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    import uuid

    settings = make_settings(ExtractorSettings, sweep_interval_s=3600)
    async with running(extractor_app(settings)):
        await Publisher(redis, settings).publish(
            "extract", [ExtractRequested(episode_id=uuid.uuid4(), user_id=user_id)]
        )

        async def dead() -> Any:
            return await stream_events_raw(redis, settings.stream("dead"))

        [entry] = await wait_for(dead, message="dead letter")
    assert b"does not exist for user" in entry[b"error"]


async def stream_events_raw(redis: Any, key: str) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in await redis.xrange(key)]


async def _turns_stored(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return await pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", user_id) == n


async def _extracted(pool: asyncpg.Pool, user_id: str) -> Any:
    eps = await episodes_of(pool, user_id)
    return eps[0] if eps and eps[0]["extracted_at"] else None


async def _snapshot(pool: asyncpg.Pool, user_id: str) -> Any:
    eps = [dict(r) for r in await episodes_of(pool, user_id)]
    facts = [dict(r) for r in await facts_of(pool, user_id)]
    reviews = await pool.fetchval("SELECT count(*) FROM fact_reviews WHERE user_id = $1", user_id)
    narrative = await pool.fetchrow("SELECT * FROM user_summaries WHERE user_id = $1", user_id)
    return eps, facts, reviews, dict(narrative) if narrative else None


TWO_PEOPLE = [
    ("Melanie", "Hey Caroline, long time no talk! How have you been?"),
    ("Caroline", "Hi Mel! I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "Wow, I'm so proud of you! I ran a charity race for mental health last Saturday."),
    # the longest turn the events contract takes (100,000 characters)
    ("Caroline", ("That's great! " + "Adoption paperwork " * 6_000)[:100_000]),
    ("Melanie", "Yes! I painted a lake sunrise last year. Painting helps me relax after work."),
    ("Caroline", "I love that you chose painting. My goal is to give kids a loving home."),
]


async def test_a_session_past_every_limit_between_two_people(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    """Two named people (the other one as the assistant role, as a chat platform
    publishes them), one turn of 100,000 characters: a valid summary within its limits
    (no dead letter, no extraction error), facts about both, each linked to its message.
    (Longer texts: test_offline's 5 MB turn.)"""
    import uuid
    from datetime import timedelta

    from shared.events import TurnReceived
    from tests.extractor.helpers import T0

    ingest = make_settings(IngestSettings)
    settings = make_settings(
        ExtractorSettings, stream_prefix=ingest.stream_prefix, sweep_interval_s=3600
    )
    publisher = Publisher(redis, ingest)
    events = [
        TurnReceived(
            user_id=user_id,
            display_name=who,
            provider="test",
            chat_id="c-two",
            role="user" if who == "Caroline" else "assistant",
            content=text,
            occurred_at=T0 + timedelta(seconds=30 * i),
            external_message_id=f"D1:{i + 1}",
        )
        for i, (who, text) in enumerate(TWO_PEOPLE)
    ]
    async with running(ingest_app(ingest)), running(extractor_app(settings)):
        for e in events:  # one entry each: the long turn is its own stream entry
            await publisher.publish("turns", [e])
        await wait_for(lambda: _turns_stored(pool, user_id, len(TWO_PEOPLE)))
        await publisher.publish(
            "episodes", [EpisodeClosed(user_id=user_id, provider="test", chat_id="c-two")]
        )
        ep = await wait_for(lambda: _extracted(pool, user_id), message="episode extracted")
    assert ep["extraction_error"] is None
    s = ep["summary"]
    assert s["title"].startswith("Caroline and Melanie on ") and len(s["title"].split()) <= 10
    assert len(s["title"]) <= 120 and len(s["summary"]) <= 1_200
    assert len(s["summary"].split()) <= 150 and len(s["key_points"]) <= 5
    assert all(len(p) <= 240 for p in s["key_points"]) and len(s["topics"]) <= 5
    assert await redis.xlen(settings.stream("dead")) == 0

    facts = {f["content"]: f for f in await facts_of(pool, user_id)}
    assert 1 <= len(facts) <= 5
    assert "Caroline went to a LGBTQ support group on 7 May 2023." in facts
    melanie = facts["Melanie painted a lake sunrise in 2022."]
    assert len(melanie["subjects"]) == 1  # about Melanie, not about the user
    messages = {
        r["id"]: r
        for r in await pool.fetch(
            "SELECT id, external_id, display_name FROM messages WHERE user_id = $1", user_id
        )
    }
    for f in facts.values():
        assert f["source"] == "heuristic" and f["confidence"] >= 0.6
        source = await pool.fetchval(
            "SELECT source_message_id FROM memory_items WHERE id = $1", f["id"]
        )
        assert source in messages
        assert messages[source]["display_name"] in f["content"]
    assert (
        messages[
            await pool.fetchval(
                "SELECT source_message_id FROM memory_items WHERE id = $1", melanie["id"]
            )
        ]["external_id"]
        == "D1:5"
    )
    assert isinstance(ep["id"], uuid.UUID)
