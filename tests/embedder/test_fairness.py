"""One user's hanging endpoint delays nobody else (issue 17.1).

Real embedder service in-process over real Redis and PostgreSQL; both users'
providers are scripted HTTP servers on loopback, one of which never answers in
time. The client's own budget is the default one (30 s per attempt, 4 attempts),
which is what made another user's 200 turns take 128 s before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.embeddings import ProviderSettingsIn, put_provider_settings
from shared.errors import ProviderUnavailable
from shared.events import EmbedRequested, EmbedTarget
from shared.guard import Circuit, Guards
from shared.streams import Publisher
from tests.embedder.conftest import add_messages
from tests.embedder.scripted import ScriptedServer, Step
from tests.query.helpers import auth
from tests.support import running, wait_for


async def _ready(pool: asyncpg.Pool, user_id: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = $1 AND embedding_state = 'ready'",
            user_id,
        )
    )


async def _use(pool: asyncpg.Pool, user_id: str, url: str, settings: Any) -> None:
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(provider="openai", endpoint_url=f"{url}/v1", model="m"),
        settings,
    )


def _requests(user_id: str, ids: list[int], per: int = 20) -> list[EmbedRequested]:
    return [
        EmbedRequested(
            user_id=user_id,
            targets=[EmbedTarget(kind="message", id=str(i)) for i in ids[n : n + per]],
        )
        for n in range(0, len(ids), per)
    ]


async def test_another_users_texts_are_embedded_in_normal_time_beside_a_hanging_provider(
    pool: asyncpg.Pool, redis: aioredis.Redis, make_settings: Callable[..., Any]
) -> None:
    fast = ScriptedServer().start()
    hanging = ScriptedServer(default=Step("sleep", seconds=200)).start()
    try:
        es: EmbedderSettings = make_settings(
            EmbedderSettings,
            embedding_provider="none",
            secret_key=SecretStr("k"),
            embed_batch_size=16,
            embed_inline_s=1.0,
        )
        # the shipped client budget: 30 s a try, 3 retries
        assert es.embedding_timeout_s == 30.0 and es.embedding_retries == 3
        alone, beside, stalled = "fair-alone", "fair-beside", "fair-stalled"
        for uid in (alone, beside, stalled):
            await pool.execute("DELETE FROM users WHERE id = $1", uid)
        ids = {}
        for uid, url in ((alone, fast.url), (beside, fast.url), (stalled, hanging.url)):
            await pool.execute("INSERT INTO users (id) VALUES ($1)", uid)
            await _use(pool, uid, url, es)
            ids[uid] = await add_messages(pool, uid, [f"{uid} turn {i}" for i in range(200)])
        publisher = Publisher(redis, es)
        async with running(embedder_app(es)):
            # side by side in one run: the same 200 turns alone, then beside the hang
            started = time.monotonic()
            await publisher.publish("embed", _requests(alone, ids[alone]))
            await wait_for(lambda: _at_least(pool, alone, 200), timeout=60, message="alone")
            normal = time.monotonic() - started

            started = time.monotonic()
            mixed = []
            for a, b in zip(
                _requests(stalled, ids[stalled]), _requests(beside, ids[beside]), strict=True
            ):
                mixed += [a, b]  # the hanging user's request first in every pair
            await publisher.publish("embed", mixed)
            await wait_for(lambda: _at_least(pool, beside, 200), timeout=60, message="beside")
            fair = time.monotonic() - started
            assert await _ready(pool, stalled) == 0
        print(f"\n200 turns alone {normal:.2f} s, beside a hanging provider {fair:.2f} s")
        # before: 127.9 s. Now one in-line wait (embed_inline_s) at most, then normal pace.
        assert fair < normal + es.embed_inline_s + 5.0
        # the hanging user's rows are not lost: pending, with a retry time
        left = await pool.fetchrow(
            "SELECT count(*) AS n, count(embedding_retry_at) AS leased FROM messages "
            "WHERE user_id = $1 AND embedding_state = 'pending'",
            stalled,
        )
        assert left["n"] == 200 and left["leased"] == 200
    finally:
        fast.stop()
        hanging.stop()


async def _at_least(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return await _ready(pool, user_id) >= n


async def test_a_users_own_searches_fall_back_to_full_text_quickly_when_their_endpoint_hangs(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    hanging = ScriptedServer(default=Step("sleep", seconds=200)).start()
    try:
        qs: QuerySettings = make_settings(
            QuerySettings,
            embedding_provider="none",
            secret_key=SecretStr("k"),
            embedding_query_deadline_s=1.0,
        )
        await pool.execute("INSERT INTO users (id) VALUES ($1)", user_id)
        await _use(pool, user_id, hanging.url, qs)
        h = await auth(pool, user_id)
        async with running(query_app(qs)) as client:
            took = []
            for n in range(5):
                started = time.monotonic()
                r = await client.post(
                    "/v1/remember", json={"content": f"I like tea number {n}"}, headers=h
                )
                assert r.status_code in (200, 201), r.text
                r = await client.post("/v1/memory/search", json={"query": "tea"}, headers=h)
                assert r.status_code == 200, r.text
                took.append(time.monotonic() - started)
            assert r.json()["mode"] == "fts_only"
            assert len(r.json()["results"]) == 5
        print(f"\nremember + search against a hanging endpoint: {[round(t, 2) for t in took]}")
        # the deadline bounds the first calls; the open circuit answers the rest at once
        assert max(took) < 2 * 1.0 + 1.5
        assert sum(took[3:]) < 1.0
    finally:
        hanging.stop()


async def test_a_circuit_opens_after_failures_in_a_row_and_lets_one_trial_through() -> None:
    guards = Guards(failures_to_open=2, cooldown_s=0.2)

    async def down() -> None:
        raise ProviderUnavailable("503")

    async def up() -> str:
        return "ok"

    for _ in range(2):
        with pytest.raises(ProviderUnavailable):
            await guards.call("http://x", down, deadline_s=1)
    with pytest.raises(ProviderUnavailable, match="circuit open"):
        await guards.call("http://x", up, deadline_s=1)
    assert await guards.call("http://other", up, deadline_s=1) == "ok"  # per endpoint
    await asyncio.sleep(0.25)
    assert guards.circuit("http://x").state == "half-open"
    assert await guards.call("http://x", up, deadline_s=1) == "ok"
    assert guards.circuit("http://x").state == "closed"
    c = Circuit(failures_to_open=1, cooldown_s=1.0)
    c.failure()
    c.failure()
    assert 1.5 < c.retry_in() <= 2.0  # doubled on re-open
