"""Ingest on real PostgreSQL and Redis: idempotency, order, episodes, dead letters."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from services.ingest.app import create_app
from services.ingest.settings import IngestSettings
from shared.events import EmbedRequested, EpisodeClosed, EpisodeStarted, encode
from shared.streams import EVENT_FIELD, Publisher
from tests.ingest.helpers import T0, dead_entries, message_count, turn
from tests.support import running, wait_for


async def test_the_same_event_twice_gives_one_row(make_settings, pool, redis, user_id):
    settings = make_settings(IngestSettings)
    pub = Publisher(redis, settings)
    event = turn(user_id, 0)
    async with running(create_app(settings)):
        await pub.publish("turns", [event, event])
        await wait_for(lambda: message_count(pool, user_id), message="the turn stored")
        await pub.publish("turns", [event])
        # the same platform message under a new event id is the same message too
        await pub.publish(
            "turns",
            [
                turn(user_id, 1, external_message_id="m-1"),
                turn(user_id, 1, external_message_id="m-1"),
            ],
        )
        await wait_for(lambda: _no_pending(redis, settings), message="all entries acknowledged")
    assert await message_count(pool, user_id) == 2


async def _no_pending(redis, settings) -> bool:
    for stream in ("turns", "episodes"):
        key = settings.stream(stream)
        if not await redis.exists(key):
            continue
        info = await redis.xpending(key, "ingest")
        if info["pending"]:
            return False
        groups = await redis.xinfo_groups(key)
        if any(g.get("lag") for g in groups):
            return False
    return True


async def test_turns_published_out_of_order_read_back_in_conversation_order(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings)
    turns = [turn(user_id, i) for i in range(12)]
    shuffled = turns[5:] + turns[:5][::-1]
    async with running(create_app(settings)):
        pub = Publisher(redis, settings)
        for t in shuffled:  # one entry at a time: they arrive in separate batches
            await pub.publish("turns", [t])
        await wait_for(lambda: _count_is(pool, user_id, 12), message="12 turns")
    rows = await pool.fetch(
        "SELECT content, episode_id FROM messages WHERE user_id = $1 ORDER BY occurred_at, id",
        user_id,
    )
    assert [r["content"] for r in rows] == [t.content for t in turns]
    assert len({r["episode_id"] for r in rows}) == 1
    episode = await pool.fetchrow("SELECT * FROM episodes WHERE user_id = $1", user_id)
    assert episode["turn_count"] == 12
    assert episode["started_at"] == T0
    assert episode["last_active_at"] == T0 + timedelta(seconds=11)


async def _count_is(pool, user_id, n):
    return await message_count(pool, user_id) == n


async def test_bad_events_are_dead_lettered_with_reasons_and_good_ones_around_them_stored(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings)
    key = settings.stream("turns")
    good_before, good_after = turn(user_id, 0), turn(user_id, 1)
    wrong_type = encode(turn(user_id, 2)).replace(b'"role":"user"', b'"role":42')
    async with running(create_app(settings)):
        await redis.xadd(key, {EVENT_FIELD: encode(good_before)})
        await redis.xadd(key, {EVENT_FIELD: b"{not json"})
        await redis.xadd(key, {EVENT_FIELD: wrong_type})
        await redis.xadd(key, {b"something": b"else"})
        await redis.xadd(key, {EVENT_FIELD: encode(good_after)})
        await wait_for(lambda: _count_is(pool, user_id, 2), message="both good turns")
        dead = await wait_for(
            lambda: _dead_at_least(redis, settings, 3), message="three dead letters"
        )
    reasons = [d["error"] for d in dead]
    assert any("invalid event" in r and "JSON" in r for r in reasons), reasons
    assert any("role" in r for r in reasons), reasons
    assert any("no 'event' field" in r for r in reasons), reasons
    assert all(d["stream"] == key and d["group"] == "ingest" for d in dead)
    assert any(d["payload"] == "{not json" for d in dead)
    assert await _no_pending(redis, settings)


async def _dead_at_least(redis, settings, n):
    dead = await dead_entries(redis, settings)
    return dead if len(dead) >= n else None


async def test_a_turn_for_another_users_episode_is_refused(make_settings, pool, redis, user_id):
    settings = make_settings(IngestSettings)
    other = f"other-{uuid.uuid4().hex[:8]}"
    episode_id = uuid.uuid4()
    pub = Publisher(redis, settings)
    async with running(create_app(settings)):
        await pub.publish("turns", [turn(other, 0, episode_id=episode_id)])
        await wait_for(lambda: message_count(pool, other), message="owner's turn")
        await pub.publish("turns", [turn(user_id, 1, episode_id=episode_id), turn(user_id, 2)])
        dead = await wait_for(lambda: _dead_at_least(redis, settings, 1), message="dead letter")
        await wait_for(lambda: message_count(pool, user_id), message="the good turn")
    assert "belongs to another user" in dead[0]["error"]
    assert await message_count(pool, user_id) == 1
    assert await message_count(pool, other) == 1


async def test_episodes_follow_the_stale_window_and_close_events(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings, stale_window_minutes=30)
    pub = Publisher(redis, settings)
    late = T0 + timedelta(hours=3)
    async with running(create_app(settings)):
        await pub.publish("turns", [turn(user_id, 0), turn(user_id, 1)])
        await pub.publish("turns", [turn(user_id, 2, occurred_at=late)])
        await wait_for(lambda: _count_is(pool, user_id, 3), message="3 turns")
        episodes = await pool.fetch(
            "SELECT id, status, turn_count FROM episodes WHERE user_id = $1 ORDER BY started_at",
            user_id,
        )
        assert [(e["status"], e["turn_count"]) for e in episodes] == [("closed", 2), ("open", 1)]

        await pub.publish(
            "episodes",
            [EpisodeClosed(user_id=user_id, provider="test", chat_id="chat-1", occurred_at=late)],
        )
        await wait_for(lambda: _status(pool, episodes[1]["id"], "closed"), message="closed")
        # A turn that arrives after its episode closed is stored in it, not dropped.
        await pub.publish(
            "turns",
            [
                turn(
                    user_id,
                    3,
                    episode_id=episodes[1]["id"],
                    occurred_at=late + timedelta(minutes=1),
                )
            ],
        )
        await wait_for(lambda: _count_is(pool, user_id, 4), message="late turn stored")
        extract = await redis.xrange(settings.stream("extract"))
        embed = await redis.xrange(settings.stream("embed"))
    assert (
        await pool.fetchval("SELECT turn_count FROM episodes WHERE id = $1", episodes[1]["id"]) == 2
    )
    asked = {f[EVENT_FIELD] for _, f in extract}
    assert any(str(episodes[0]["id"]).encode() in a for a in asked)  # the stale one
    assert any(str(episodes[1]["id"]).encode() in a for a in asked)  # the closed one
    targets = [
        t.id for _, f in embed for t in EmbedRequested.model_validate_json(f[EVENT_FIELD]).targets
    ]
    ids = [
        str(r["id"])
        for r in await pool.fetch("SELECT id FROM messages WHERE user_id = $1", user_id)
    ]
    assert sorted(set(targets)) == sorted(ids)


async def _status(pool, episode_id, status):
    return await pool.fetchval("SELECT status FROM episodes WHERE id = $1", episode_id) == status


async def test_episode_started_opens_the_named_episode_and_closes_the_previous(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings)
    pub = Publisher(redis, settings)
    first, second = uuid.uuid4(), uuid.uuid4()
    common = {"user_id": user_id, "provider": "test", "chat_id": "chat-1"}
    async with running(create_app(settings)):
        await pub.publish(
            "episodes", [EpisodeStarted(episode_id=first, **common, frame="web", occurred_at=T0)]
        )
        await wait_for(lambda: _status(pool, first, "open"), message="first open")
        await pub.publish("turns", [turn(user_id, 0)])
        await wait_for(lambda: message_count(pool, user_id), message="turn")
        await pub.publish(
            "episodes",
            [EpisodeStarted(episode_id=second, **common, occurred_at=T0 + timedelta(hours=1))],
        )
        await wait_for(lambda: _status(pool, first, "closed"), message="first closed")
    rows = await pool.fetch(
        "SELECT id, status, turn_count, frame FROM episodes WHERE user_id = $1", user_id
    )
    by_id = {r["id"]: r for r in rows}
    assert by_id[first]["turn_count"] == 1 and by_id[first]["frame"] == "web"
    assert by_id[second]["status"] == "open"


async def test_a_turn_keeps_the_time_it_happened(make_settings, pool, redis, user_id):
    settings = make_settings(IngestSettings)
    old = turn(user_id, 0, occurred_at="2019-05-08T13:56:00")  # no zone: read as UTC
    async with running(create_app(settings)):
        await Publisher(redis, settings).publish("turns", [old])
        await wait_for(lambda: message_count(pool, user_id), message="turn")
    when = await pool.fetchval("SELECT occurred_at FROM messages WHERE user_id = $1", user_id)
    assert when.isoformat() == "2019-05-08T13:56:00+00:00"


async def test_a_batch_mixing_users_asks_for_every_turns_embedding(
    make_settings, pool, redis, user_id
):
    # One request per batch; with several users it names none, and the embedder
    # reads each row's owner (tests/embedder: test_one_batch_mixing_users_...).
    other = f"{user_id}-b"
    settings = make_settings(IngestSettings)
    pub = Publisher(redis, settings)
    async with running(create_app(settings)):
        await pub.publish("turns", [turn(u, i) for i in range(3) for u in (user_id, other)])
        await wait_for(lambda: _count_is(pool, other, 3), message="both users stored")
        await wait_for(lambda: _count_is(pool, user_id, 3), message="both users stored")
        embed = await redis.xrange(settings.stream("embed"))
    owner = {
        str(r["id"]): r["user_id"]
        for r in await pool.fetch(
            "SELECT id, user_id FROM messages WHERE user_id = ANY($1::text[])", [user_id, other]
        )
    }
    asked: set[str] = set()
    for _, f in embed:
        event = EmbedRequested.model_validate_json(f[EVENT_FIELD])
        asked.update(t.id for t in event.targets)
        # a request names a user only when every row in it is that user's
        if event.user_id is not None:
            assert {owner[t.id] for t in event.targets} == {event.user_id}
    assert asked == set(owner)


async def test_what_postgresql_would_refuse_is_dead_lettered_at_once_with_its_reason(
    make_settings, pool, redis, user_id
):
    """Issue 17.5: a NUL byte in any text or JSON field (``content`` too, issue 29.18:
    as the API refuses it), a year 0001 or 9999, NaN in JSON; each dead-lettered on
    its first delivery, naming the field, while the good turns around them are stored."""
    settings = make_settings(IngestSettings)
    key = settings.stream("turns")
    good = encode(turn(user_id, 0))
    poison = {
        "display_name": {"display_name": "Ti\u0000m"},
        "content": {"content": "hel\u0000lo"},
        "metadata": {"metadata": {"k": "v\u0000"}},
        "chat_id": {"chat_id": "c\u0000"},
        "tool_args": {"tool_args": {"q": ["\u0000"]}},
        "0001": {"occurred_at": "0001-01-01T00:00:00Z"},
        "9999": {"occurred_at": "9999-12-31T23:59:59Z"},
        "NaN": {"metadata": {"score": float("nan")}},
    }
    async with running(create_app(settings)):
        await redis.xadd(key, {EVENT_FIELD: good})
        for fields in poison.values():
            payload = json.loads(encode(turn(user_id, 1)))
            payload.update(fields)
            payload["event_id"] = str(uuid.uuid4())
            await redis.xadd(key, {EVENT_FIELD: json.dumps(payload)})
        await redis.xadd(key, {EVENT_FIELD: encode(turn(user_id, 2))})
        await wait_for(lambda: _count_is(pool, user_id, 2), message="both good turns")
        dead = await wait_for(
            lambda: _dead_at_least(redis, settings, len(poison)), message="poison dead"
        )
    assert len(dead) == len(poison)
    assert all(d["attempts"] == "1" for d in dead)
    reasons = " | ".join(d["error"] for d in dead)
    names = ("display_name", "content", "metadata", "chat_id", "tool_args", "0001", "9999", "nan")
    for name in names:
        assert name in reasons, (name, reasons)


async def test_an_episode_opened_by_the_other_speaker_is_named_after_the_user(
    make_settings, pool, redis, user_id
):
    """The user is the speaker whose role is user: a session the other side opens
    (a bot's greeting, the other person in a chat between two) is not named after it."""
    settings = make_settings(IngestSettings)
    pub = Publisher(redis, settings)
    together = "chat-together"
    apart = "chat-apart"
    async with running(create_app(settings)):
        # published together (one batch, unless ingest reads them apart): the other
        # speaker first, then the user
        await pub.publish(
            "turns",
            [
                turn(user_id, 0, role="assistant", display_name="Ann", chat_id=together),
                turn(user_id, 1, role="user", display_name="Tim", chat_id=together),
            ],
        )
        await wait_for(lambda: _count_is(pool, user_id, 2), message="2 turns")
        # in two batches: the other speaker's opening turn arrives alone
        await pub.publish(
            "turns", [turn(user_id, 10, role="assistant", display_name="Ann", chat_id=apart)]
        )
        await wait_for(lambda: _count_is(pool, user_id, 3), message="3 turns")
        await pub.publish(
            "turns", [turn(user_id, 11, role="user", display_name="Tim", chat_id=apart)]
        )
        await wait_for(lambda: _count_is(pool, user_id, 4), message="4 turns")
    rows = await pool.fetch(
        "SELECT e.chat_id, e.display_name, coalesce(e.display_name, u.display_name) AS shown "
        "FROM episodes e JOIN users u ON u.id = e.user_id WHERE e.user_id = $1",
        user_id,
    )
    named = {r["chat_id"]: (r["display_name"], r["shown"]) for r in rows}
    # the episode's own name is the user's when the batch held a user turn, else
    # none (the user's name shows); never the other speaker's
    for chat in (together, apart):
        assert named[chat][0] in (None, "Tim") and named[chat][1] == "Tim"
