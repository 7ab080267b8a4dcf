"""Erasure that erases (issue 17.4): turns published before, during and after the
erase never bring the user back, and no stream keeps their content.

Real ingest and query services in-process over real Redis and PostgreSQL; a
publisher keeps sending the erased user's and a bystander's turns throughout."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.events import TurnReceived
from shared.streams import Publisher
from tests.query.helpers import admin_auth, auth
from tests.support import running, wait_for

SECRET = "erase-me-secret"


def _turns(user_id: str, n: int, start: int) -> list[TurnReceived]:
    return [
        TurnReceived(
            user_id=user_id,
            provider="test",
            chat_id="c",
            role="user",
            content=f"{SECRET if user_id.startswith('gone') else 'hello'} {start + i}",
        )
        for i in range(n)
    ]


async def _count(pool: asyncpg.Pool, sql: str, user_id: str) -> int:
    return int(await pool.fetchval(sql, user_id))


async def _entries_of(redis: aioredis.Redis, prefix: str, user_id: str) -> dict[str, int]:
    """Entries per stream that carry the user's content or name them as owner."""
    found: dict[str, int] = {}
    async for key in redis.scan_iter(match=f"{prefix}*", _type="stream"):
        for _, fields in await redis.xrange(key):
            raw = fields.get(b"event") or fields.get(b"payload") or b""
            try:
                owner = json.loads(raw).get("user_id")
            except ValueError:
                owner = None
            if SECRET.encode() in raw or (owner == user_id and b"turn" in key):
                found[key.decode()] = found.get(key.decode(), 0) + 1
    return found


async def test_turns_published_during_the_erase_never_bring_the_user_back(
    pool: asyncpg.Pool, redis: aioredis.Redis, make_settings: Callable[..., Any]
) -> None:
    qs: QuerySettings = make_settings(QuerySettings)
    ings: IngestSettings = make_settings(IngestSettings, stream_prefix=qs.stream_prefix)
    gone, kept = f"gone-{uuid.uuid4().hex[:8]}", f"kept-{uuid.uuid4().hex[:8]}"
    publisher = Publisher(redis, qs)
    sent = {gone: 0, kept: 0}
    stop = asyncio.Event()

    async def publish_forever() -> None:
        while not stop.is_set():
            for uid in (gone, kept):
                await publisher.publish("turns", _turns(uid, 10, sent[uid]))
                sent[uid] += 10
            await asyncio.sleep(0.01)

    async with running(ingest_app(ings)), running(query_app(qs)) as client:
        admin = await admin_auth(pool)
        await publisher.publish("turns", _turns(gone, 50, 10_000))
        # an entry of theirs that ingest dead-letters (a role that does not exist)
        bad = json.loads(_turns(gone, 1, 20_000)[0].model_dump_json(by_alias=True))
        await publisher.publish_raw("turns", [json.dumps({**bad, "role": "wizard"}).encode()])
        await wait_for(
            lambda: _count(pool, "SELECT count(*) FROM messages WHERE user_id = $1", gone),
            message="the user's first turns stored",
        )
        await wait_for(lambda: redis.xlen(qs.stream("dead")), message="the bad entry dead-lettered")
        await auth(pool, gone)  # an API key too
        task = asyncio.create_task(publish_forever())
        await asyncio.sleep(0.5)
        r = await client.delete(f"/v1/users/{gone}", headers=admin)
        assert r.status_code == 200, r.text
        erased = r.json()
        await asyncio.sleep(1.0)  # later turns keep coming
        stop.set()
        await task
        # the bystander's turns are all stored: everything published before is handled
        await wait_for(
            lambda: _at_least(pool, kept, sent[kept]), timeout=60, message="bystander stored"
        )
        await asyncio.sleep(0.5)
        print(f"\nerase answer: {erased}\nturns published for the erased user: {sent[gone]}")
        assert erased["rows"]["messages"] >= 50 and erased["rows"]["episodes"] >= 1
        assert erased["rows"]["users"] == 1 and erased["rows"]["api_keys"] == 1
        assert erased["stream_entries"].get("dead", 0) >= 1
        for table in ("users", "messages", "episodes", "api_keys"):
            col = "id" if table == "users" else "user_id"
            n = await pool.fetchval(f"SELECT count(*) FROM {table} WHERE {col} = $1", gone)
            assert n == 0, table
        assert await _entries_of(redis, qs.stream_prefix, gone) == {}

        # until an admin re-enables the id, nothing of theirs is stored; then it is
        r = await client.post(f"/v1/users/{gone}/reenable", headers=await auth(pool, kept))
        assert r.status_code == 403
        r = await client.post(f"/v1/users/{gone}/reenable", headers=admin)
        assert r.status_code == 200, r.text
        r = await client.post(f"/v1/users/{gone}/reenable", headers=admin)
        assert r.status_code == 404
        await publisher.publish("turns", _turns(gone, 1, 30_000))
        await wait_for(
            lambda: _count(pool, "SELECT count(*) FROM messages WHERE user_id = $1", gone),
            message="stored again after re-enabling",
        )


async def _at_least(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return await _count(pool, "SELECT count(*) FROM messages WHERE user_id = $1", user_id) >= n


async def test_a_stream_rebuilt_after_an_erasure_keeps_no_deleted_bytes_and_its_groups(
    redis: aioredis.Redis,
) -> None:
    """Issue 29.2: XDEL leaves an entry's bytes in its node (so in every snapshot and
    AOF rewrite); the erasure rebuilds the stream, with the same ids, groups,
    consumers and pending entries (idle time, delivery count)."""
    from shared.erasure import compact_stream

    key = f"compact-{uuid.uuid4().hex[:8]}"
    ids = [await redis.xadd(key, {b"event": f"entry {i} {SECRET}-{i}".encode()}) for i in range(10)]
    await redis.xgroup_create(key, "g", id="0")
    await redis.xreadgroup("g", "c1", {key: ">"}, count=4)  # 4 delivered, pending
    await redis.xack(key, "g", ids[0])
    await redis.xclaim(key, "g", "c1", 0, [ids[1]])  # delivered twice now
    await redis.xgroup_createconsumer(key, "g", "idle-one")
    await redis.xdel(key, ids[2], ids[5])
    # DUMP is what a snapshot or an AOF rewrite writes (uncompressed, to read it)
    compression = (await redis.config_get("rdbcompression"))["rdbcompression"]
    await redis.config_set("rdbcompression", "no")
    try:
        assert f"{SECRET}-5".encode() in await redis.dump(key)  # still in the node
        before = await redis.xinfo_stream(key)
        pending = await redis.xpending_range(key, "g", min="-", max="+", count=100)

        assert await compact_stream(redis, key)

        dumped = await redis.dump(key)
    finally:
        await redis.config_set("rdbcompression", compression)
    assert f"{SECRET}-5".encode() not in dumped and f"{SECRET}-2".encode() not in dumped
    assert f"{SECRET}-6".encode() in dumped
    after = await redis.xinfo_stream(key)
    for field in ("length", "last-generated-id", "entries-added", "max-deleted-entry-id"):
        assert after[field] == before[field], field
    [group] = await redis.xinfo_groups(key)
    assert group["last-delivered-id"] == ids[3] and group["pending"] == 2
    assert sorted(c["name"] for c in await redis.xinfo_consumers(key, "g")) == [
        b"c1",
        b"idle-one",
    ]
    again = await redis.xpending_range(key, "g", min="-", max="+", count=100)
    assert [(p["message_id"], p["times_delivered"]) for p in again] == [
        (p["message_id"], p["times_delivered"]) for p in pending if p["message_id"] != ids[2]
    ]
    # the group reads on where it was
    got = await redis.xreadgroup("g", "c2", {key: ">"})
    assert [e[0] for e in got[0][1]] == [ids[4], *ids[6:]]
