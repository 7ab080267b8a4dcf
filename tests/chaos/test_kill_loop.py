"""Load with faults: two instances of every consumer in one group, one of them
SIGKILLed and restarted every couple of seconds, Redis and PostgreSQL restarted
mid-load. Every published turn must be stored exactly once, embedded, and its
episode extracted."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from shared.events import TurnReceived, encode
from shared.streams import EVENT_FIELD
from tests.chaos.conftest import SCALE, record
from tests.chaos.explain import explain
from tests.support import wait_for

USERS = 8
TURNS = 1500 * SCALE
BATCH = 25
KILL_EVERY_S = 2.0


def _now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]


def _turns(start: int, n: int, tag: str) -> list[TurnReceived]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        TurnReceived(
            user_id=f"chaos-{tag}-{i % USERS}",
            provider="chaos",
            chat_id=f"chat-{i % 3}",
            role="user" if i % 2 == 0 else "assistant",
            content=f"turn {i}: I like tea number {i} and my sister Ann visits on day {i % 7}",
            occurred_at=t0 + timedelta(seconds=i),
        )
        for i in range(start, start + n)
    ]


async def _publish(redis_url: str, key: str, events: list[TurnReceived]) -> None:
    """XADD until Redis takes it (it may be restarting); the same event ids on a retry."""
    while True:
        r = aioredis.from_url(redis_url)
        try:
            pipe = r.pipeline(transaction=False)
            for e in events:
                pipe.xadd(key, {EVENT_FIELD: encode(e)})
            await pipe.execute()
            return
        except (aioredis.RedisError, OSError):
            await asyncio.sleep(0.2)
        finally:
            await r.aclose()


async def _fetchval(url: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def test_no_turn_is_lost_or_duplicated_under_kills_and_restarts(stack: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    users = [f"chaos-{tag}-{u}" for u in range(USERS)]
    key = "chaos:turns"
    published: list[TurnReceived] = []
    done = asyncio.Event()
    events: list[str] = []

    async def publisher() -> None:
        for start in range(0, TURNS, BATCH):
            batch = _turns(start, min(BATCH, TURNS - start), tag)
            await _publish(stack.redis_url, key, batch)
            published.extend(batch)
            await asyncio.sleep(0.4)
        events.append(f"{_now()} all {len(published)} turns published")
        done.set()

    async def killer() -> None:
        rng = random.Random(17)
        started = time.monotonic()
        redis_done = pg_done = False
        while not done.is_set():
            await asyncio.sleep(KILL_EVERY_S)
            for inst in stack.consumers():  # one that died on its own is started again
                if inst.proc is not None and inst.proc.poll() is not None:
                    inst.start()
            victim = rng.choice(stack.consumers())
            victim.kill()
            victim.start()
            events.append(f"{_now()} kill {victim.service}-{victim.n}")
            elapsed = time.monotonic() - started
            if not redis_done and len(published) >= TURNS // 3:
                took = await asyncio.to_thread(stack.restart_redis)
                events.append(f"{_now()} redis restarted ({took:.1f} s) at {elapsed:.0f} s")
                redis_done = True
            if not pg_done and len(published) >= 2 * TURNS // 3:
                took = await asyncio.to_thread(stack.restart_postgres)
                events.append(f"{_now()} postgres restarted ({took:.1f} s) at {elapsed:.0f} s")
                pg_done = True

    started = time.monotonic()
    await asyncio.gather(publisher(), killer())
    for inst in stack.consumers():
        if inst.proc is not None and inst.proc.poll() is not None:
            inst.start()
    load_s = time.monotonic() - started

    url = stack.database_url
    stored = "SELECT count(DISTINCT event_id) FROM messages WHERE user_id = ANY($1)"
    try:
        await wait_for(
            lambda: _equals(url, stored, len(published), users),
            timeout=180,
            interval=0.25,
            message="every published turn stored",
        )
    except AssertionError:
        print(await explain(stack, users, events, published=published))
        raise
    unembedded = (
        "SELECT count(*) FROM messages WHERE user_id = ANY($1) AND embedding_state <> 'ready'"
    )
    try:
        await wait_for(
            lambda: _equals(url, unembedded, 0, users, stack),
            timeout=180,
            interval=0.25,
            message="embedded",
        )
    except AssertionError:
        print(await explain(stack, users, events))
        raise
    unextracted = (
        "SELECT count(*) FROM episodes WHERE user_id = ANY($1) "
        "AND (status <> 'closed' OR extract_due OR extracted_at IS NULL)"
    )
    await wait_for(
        lambda: _equals(url, unextracted, 0, users, stack),
        timeout=180,
        interval=0.25,
        message="extracted",
    )
    ids = [e.event_id for e in published]
    lost = await _fetchval(
        url,
        "SELECT count(*) FROM unnest($1::uuid[]) AS p(id) "
        "WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.event_id = p.id)",
        ids,
    )
    duplicated = await _fetchval(
        url,
        "SELECT count(*) - count(DISTINCT event_id) FROM messages WHERE user_id = ANY($1)",
        users,
    )
    fact_dups = await _fetchval(
        url,
        "SELECT count(*) - count(DISTINCT (user_id, episode_id, content)) FROM memory_items "
        "WHERE user_id = ANY($1) AND episode_id IS NOT NULL",
        users,
    )
    if fact_dups:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                "SELECT m.user_id, m.episode_id, m.content, m.created_at, m.category, "
                "e.extracted_at FROM memory_items m JOIN episodes e ON e.id = m.episode_id "
                "WHERE m.user_id = ANY($1) AND (m.user_id, m.episode_id, m.content) IN ("
                "SELECT user_id, episode_id, content FROM memory_items WHERE user_id = ANY($1) "
                "GROUP BY 1, 2, 3 HAVING count(*) > 1)",
                users,
            )
            print("\nfacts stored twice:", *[dict(r) for r in rows], sep="\n")
        finally:
            await conn.close()
    turn_count = await _fetchval(
        url, "SELECT sum(turn_count) FROM episodes WHERE user_id = ANY($1)", users
    )
    kills = sum(i.kills for i in stack.instances)
    restarts = [e for e in events if "restarted" in e]
    print(f"\n{len(published)} turns in {load_s:.0f} s; {kills} kills; " + "; ".join(restarts))
    assert len(restarts) == 2, events
    record("turns published", len(published), f"{USERS} users, load {load_s:.0f} s")
    record("SIGKILLs", kills, "ingest, embedder, extractor; 2 instances each")
    record("restarts", 2, "Redis (AOF) and PostgreSQL mid-load")
    record("lost", lost, "published turns not stored")
    record("duplicated", duplicated, "turns stored twice")
    record(
        "facts learned twice",
        fact_dups,
        "same fact, same episode, from a later re-extraction (not a redelivery)",
    )
    assert lost == 0
    assert duplicated == 0
    assert turn_count == len(published)
    if fact_dups:
        # Each extraction is stored at most once (processed_events, in its transaction);
        # these come from a second extraction of an episode that got more turns, which
        # learns the same fact again: the extractor's dedup/supersession (issue 15).
        pytest.xfail(f"{fact_dups} fact(s) learned twice by a re-extraction (issue 15)")


async def _equals(url: str, sql: str, want: int, users: list[str], stack: Any = None) -> bool:
    for inst in stack.consumers() if stack is not None else []:
        if inst.proc is not None and inst.proc.poll() is not None:
            inst.start()  # as a supervisor (systemd) would: one that died at start-up
    try:
        return int(await _fetchval(url, sql, users) or 0) == want
    except (OSError, asyncpg.PostgresError):
        return False
