"""Per-chat order across the turns and episodes streams, on real PostgreSQL and Redis:
a close closes the right episode at its own time whichever stream is read first."""

from __future__ import annotations

import io
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import redis.asyncio as aioredis

from engram_cli.publish import publish_stream
from services.extractor.app import create_app as extractor_app
from services.extractor.settings import ExtractorSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.events import EpisodeClosed, TurnReceived, encode
from shared.streams import EVENT_FIELD, Publisher
from tests.ingest.helpers import T0, message_count, turn
from tests.support import running, wait_for

README = """\
{"user_id": "USER", "display_name": "Tim", "provider": "cli", "chat_id": "c1", "role": "user", "content": "What's the weather in Silver Spring, MD?", "occurred_at": "2026-11-20T10:00:00Z"}
{"user_id": "USER", "provider": "cli", "chat_id": "c1", "role": "assistant", "content": "Sunny, 12 C.", "occurred_at": "2026-11-20T10:00:05Z"}
{"schema": "episode.closed.v1", "user_id": "USER", "provider": "cli", "chat_id": "c1", "occurred_at": "2026-11-20T10:05:00Z"}
"""  # noqa: E501


async def _episodes(pool, user_id):
    return await pool.fetch(
        """SELECT id, status, closed_by, started_at, last_active_at, closed_at, turn_count,
                  extract_due
           FROM episodes WHERE user_id = $1 ORDER BY started_at""",
        user_id,
    )


async def _extract_asked(redis, settings) -> list[str]:
    return [
        json.loads(f[EVENT_FIELD])["episode_id"]
        for _, f in await redis.xrange(settings.stream("extract"))
    ]


async def test_the_readme_example_closes_its_episode_within_seconds(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings)
    source = io.StringIO(README.replace("USER", user_id))
    async with running(ingest_app(settings)):
        started = time.monotonic()
        assert await publish_stream(settings, source, strict=False) == 0

        async def closed():
            eps = await _episodes(pool, user_id)
            return (
                eps if eps and eps[0]["status"] == "closed" and eps[0]["turn_count"] == 2 else None
            )

        [ep] = await wait_for(closed, timeout=10, message="the README's episode closed")
        took = time.monotonic() - started
        asked = await wait_for(lambda: _extract_asked(redis, settings), message="extract asked")
    assert took < 5, took
    assert ep["closed_by"] == "event"
    assert ep["closed_at"] == datetime(2026, 11, 20, 10, 5, tzinfo=UTC)
    assert ep["turn_count"] == 2
    assert str(ep["id"]) in asked


async def test_a_close_published_before_its_turns_still_closes_the_right_episode(
    make_settings, pool, infra, user_id
):
    """Separate connections, no sleep: the close goes first, the turns right after.
    With ingest running, and with both already waiting when ingest starts (its two
    readers then race)."""
    settings = make_settings(IngestSettings)
    close_at = T0 + timedelta(minutes=5)
    closes = aioredis.from_url(infra.redis_url)
    turns_conn = aioredis.from_url(infra.redis_url)
    try:

        async def publish_session(chat: str) -> None:
            await Publisher(closes, settings).publish(
                "episodes",
                [
                    EpisodeClosed(
                        user_id=user_id, provider="test", chat_id=chat, occurred_at=close_at
                    )
                ],
            )
            await Publisher(turns_conn, settings).publish(
                "turns", [turn(user_id, i, chat_id=chat) for i in range(4)]
            )

        await publish_session("before-start")  # both wait for ingest
        async with running(ingest_app(settings)):
            await publish_session("while-running")
            await wait_for(lambda: _count(pool, user_id, 8), message="8 turns")
            # a turn after the close opens a new session
            await Publisher(turns_conn, settings).publish(
                "turns",
                [
                    turn(
                        user_id,
                        0,
                        chat_id="while-running",
                        occurred_at=close_at + timedelta(seconds=1),
                    )
                ],
            )
            await wait_for(lambda: _count(pool, user_id, 9), message="9 turns")
    finally:
        await closes.aclose()
        await turns_conn.aclose()
    rows = await pool.fetch(
        """SELECT chat_id, status, closed_by, closed_at, turn_count, started_at
           FROM episodes WHERE user_id = $1 ORDER BY chat_id, started_at""",
        user_id,
    )
    by_chat: dict[str, list] = {}
    for r in rows:
        by_chat.setdefault(r["chat_id"], []).append(r)
    [before] = by_chat["before-start"]
    assert (before["status"], before["closed_by"], before["closed_at"]) == (
        "closed",
        "event",
        close_at,
    )
    assert before["turn_count"] == 4
    first, after = by_chat["while-running"]
    assert (first["status"], first["closed_by"], first["closed_at"]) == (
        "closed",
        "event",
        close_at,
    )
    assert first["turn_count"] == 4
    assert after["status"] == "open" and after["turn_count"] == 1
    assert (
        await pool.fetchval("SELECT count(*) FROM episode_closes WHERE user_id = $1", user_id) == 0
    )


async def test_a_late_turn_joins_the_closed_episode_and_rearms_its_summary(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings)
    pub = Publisher(redis, settings)
    close_at = T0 + timedelta(minutes=5)
    async with running(ingest_app(settings)):
        await pub.publish("turns", [turn(user_id, i) for i in range(3)])
        await wait_for(lambda: _count(pool, user_id, 3), message="3 turns")
        await pub.publish(
            "episodes",
            [
                EpisodeClosed(
                    user_id=user_id, provider="test", chat_id="chat-1", occurred_at=close_at
                )
            ],
        )
        [ep] = await wait_for(lambda: _closed(pool, user_id), message="closed")
        await pool.execute("UPDATE episodes SET extract_due = false WHERE id = $1", ep["id"])
        asked_before = (await _extract_asked(redis, settings)).count(str(ep["id"]))
        # a turn that happened before the close but arrives after it
        await pub.publish("turns", [turn(user_id, 3, occurred_at=T0 + timedelta(minutes=2))])
        await wait_for(lambda: _count(pool, user_id, 4), message="late turn")
        asked = await wait_for(
            lambda: _asked_more(redis, settings, ep["id"], asked_before), message="re-armed"
        )
    [after] = await _episodes(pool, user_id)
    assert after["id"] == ep["id"] and after["turn_count"] == 4
    assert after["closed_at"] == close_at and after["extract_due"]
    assert asked


async def test_an_event_from_the_future_is_stored(make_settings, pool, redis, user_id):
    settings = make_settings(IngestSettings)
    payload = json.loads(encode(turn(user_id, 0)))
    payload["sentiment"] = {"score": 0.9}  # a field a newer producer added
    payload["schema_revision"] = 7
    async with running(ingest_app(settings)):
        await redis.xadd(settings.stream("turns"), {EVENT_FIELD: json.dumps(payload)})
        await wait_for(lambda: message_count(pool, user_id), message="the turn stored")
    assert await redis.xlen(settings.stream("dead")) == 0


async def test_twenty_sessions_published_in_one_go_all_get_summaries_with_their_spans(
    make_settings, pool, redis, user_id
):
    ingest = make_settings(IngestSettings)
    extractor = make_settings(
        ExtractorSettings, stream_prefix=ingest.stream_prefix, sweep_interval_s=1.0
    )
    sessions = []
    events: list[TurnReceived] = []
    for s in range(20):
        start = datetime(2023, 5, 1, 9, tzinfo=UTC) + timedelta(days=s)
        times = [start + timedelta(minutes=2 * i) for i in range(6)]
        sessions.append((times[0], times[-1]))
        events += [
            turn(
                user_id,
                i,
                chat_id="locomo-like",
                occurred_at=t,
                content=f"session {s} line {i}: we talked about topic {s} and plans",
            )
            for i, t in enumerate(times)
        ]

    async def no_embedder(_: str):
        return None

    async with (
        running(ingest_app(ingest)),
        running(extractor_app(extractor, embedder_for=no_embedder)) as client,
    ):
        started = time.monotonic()
        await Publisher(redis, ingest).publish("turns", events)

        async def summarised():
            rows = await pool.fetch(
                """SELECT started_at, last_active_at, closed_at, status, summary_text
                   FROM episodes WHERE user_id = $1 ORDER BY started_at""",
                user_id,
            )
            done = [r for r in rows if r["summary_text"]]
            return rows if len(rows) == 20 and len(done) == 20 else None

        rows = await wait_for(summarised, timeout=60, interval=0.25, message="20 summaries")
        took = time.monotonic() - started

        # (the backlog gauge counts every user's episodes: the test database is shared)
        metrics = (await client.get("/metrics")).text
        assert "engram_extract_backlog_episodes" in metrics
    count = next(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("engram_extract_close_to_summary_seconds_count")
    )
    assert count >= 20
    assert took < 60
    for (first, last), r in zip(sessions, rows, strict=True):
        assert r["status"] == "closed"
        assert (r["started_at"], r["last_active_at"], r["closed_at"]) == (first, last, last)


async def _count(pool, user_id, n) -> bool:
    return await message_count(pool, user_id) == n


async def _closed(pool, user_id):
    eps = await _episodes(pool, user_id)
    return eps if eps and all(e["status"] == "closed" for e in eps) else None


async def _asked_more(redis, settings, episode_id: uuid.UUID, before: int) -> bool:
    return (await _extract_asked(redis, settings)).count(str(episode_id)) > before


async def test_a_close_handled_after_a_later_sessions_turns_splits_them_off(
    make_settings, pool, redis, user_id
):
    """The next session's first turn (within the stale window) was stored before the
    close of the previous one was handled: the close keeps its episode to its time
    and the later turn moves to an episode of its own."""
    settings = make_settings(IngestSettings)
    pub = Publisher(redis, settings)
    close_at = T0 + timedelta(minutes=5)
    async with running(ingest_app(settings)):
        await pub.publish("turns", [turn(user_id, i) for i in range(4)])
        await pub.publish("turns", [turn(user_id, 9, occurred_at=close_at + timedelta(minutes=1))])
        await wait_for(lambda: _count(pool, user_id, 5), message="5 turns")
        await pub.publish(
            "episodes",
            [
                EpisodeClosed(
                    user_id=user_id, provider="test", chat_id="chat-1", occurred_at=close_at
                )
            ],
        )

        async def two():
            eps = await _episodes(pool, user_id)
            return eps if len(eps) == 2 else None

        first, second = await wait_for(two, message="split in two")
    assert (first["status"], first["closed_by"], first["closed_at"]) == (
        "closed",
        "event",
        close_at,
    )
    assert (first["turn_count"], first["last_active_at"]) == (4, T0 + timedelta(seconds=3))
    assert (second["status"], second["turn_count"]) == ("open", 1)
    assert second["started_at"] == close_at + timedelta(minutes=1)
    per_episode = await pool.fetch(
        "SELECT episode_id, count(*) AS n FROM messages WHERE user_id = $1 GROUP BY 1", user_id
    )
    assert {r["episode_id"]: r["n"] for r in per_episode} == {first["id"]: 4, second["id"]: 1}
