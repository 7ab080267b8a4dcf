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
from shared.embeddings.providers import MAX_USER_ENDPOINTS, ProviderConfig, ProviderRegistry
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
        # before: 127.9 s; then one in-line wait (5 s); now the hang is never waited for
        assert fair < 1.5 * normal + 1.0
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


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def _one_turn_latency(
    pool: asyncpg.Pool, publisher: Publisher, user_id: str, n: int
) -> float:
    """Publish one new turn of ``user_id`` (as ingest does) and time it to ``ready``."""
    [mid] = await add_messages(pool, user_id, [f"{user_id} live turn {n}"])
    started = time.monotonic()
    await publisher.publish("embed", _requests(user_id, [mid]))

    async def ready() -> bool:
        state = await pool.fetchval("SELECT embedding_state FROM messages WHERE id = $1", mid)
        return bool(state == "ready")

    await wait_for(ready, timeout=60, interval=0.02, message="the other user's turn")
    return time.monotonic() - started


async def _live_turns(
    pool: asyncpg.Pool, publisher: Publisher, user_id: str, tag: int, seconds: float
) -> list[float]:
    """A turn every 0.25 s for ``seconds`` (open loop: a stalled read delays every
    turn sent meanwhile, as it would a chat's), each timed to ``ready``."""
    tasks = []
    for n in range(int(seconds / 0.25)):
        tasks.append(asyncio.create_task(_one_turn_latency(pool, publisher, user_id, tag + n)))
        await asyncio.sleep(0.25)
    return list(await asyncio.gather(*tasks))


async def test_another_users_live_turns_keep_their_pace_beside_a_hanging_or_rotating_endpoint(
    pool: asyncpg.Pool, redis: aioredis.Redis, make_settings: Callable[..., Any]
) -> None:
    """Issue 29.11: one user's endpoint hangs, or its URL changes every 3 s (each URL a
    new endpoint, a new circuit), while that user's turns keep coming; another user's
    turns, one every 0.25 s as a chat sends them, are embedded at the pace they have
    alone (p95 within 1.5x; before: ~5 s against 0.18 s, reads waiting for the hang)."""
    fast = ScriptedServer().start()
    hanging = ScriptedServer(default=Step("sleep", seconds=200)).start()
    try:
        es: EmbedderSettings = make_settings(
            EmbedderSettings, embedding_provider="none", secret_key=SecretStr("k")
        )
        other, noisy = "live-other", "live-noisy"
        for uid in (other, noisy):
            await pool.execute("DELETE FROM users WHERE id = $1", uid)
            await pool.execute("INSERT INTO users (id) VALUES ($1)", uid)
        await _use(pool, other, fast.url, es)
        await _use(pool, noisy, hanging.url, es)
        publisher = Publisher(redis, es)
        # Every case in every round, side by side: a machine whose load changes from one
        # minute to the next (other test runs) loads each case alike. One 12 s baseline
        # before 12 s of each noisy case measured them under different loads and once
        # missed 1.5x for it. Rounds after the first keep the noisy user's earlier calls
        # in flight (a 120 s deadline), quiet: "alone" is without the noisy user's traffic.
        window, rounds = 4.0, 3
        samples: dict[str, list[float]] = {"alone": [], "hanging": [], "rotating": []}
        rotations = 0

        async def noise(case: str, stop: asyncio.Event) -> None:
            nonlocal rotations
            n, rotated = 0, time.monotonic()
            while not stop.is_set():
                if case == "rotating" and time.monotonic() - rotated >= 3.0:
                    # a new URL: another endpoint key, circuit and client
                    rotations += 1
                    await _use(pool, noisy, f"{hanging.url}/r{rotations}", es)
                    rotated = time.monotonic()
                ids = await add_messages(pool, noisy, [f"noisy {case} {n}"])
                await publisher.publish("embed", _requests(noisy, ids))
                n += 1
                await asyncio.sleep(0.3)

        async with running(embedder_app(es)):
            await _live_turns(pool, publisher, other, 0, 1.0)  # warm-up
            tag = 100
            for _ in range(rounds):
                for case in samples:
                    tag += 1000
                    if case == "alone":
                        samples[case] += await _live_turns(pool, publisher, other, tag, window)
                        continue
                    await _use(pool, noisy, hanging.url, es)
                    stop = asyncio.Event()
                    task = asyncio.create_task(noise(case, stop))
                    try:
                        await asyncio.sleep(0.5)  # the noisy user's first calls are in flight
                        samples[case] += await _live_turns(pool, publisher, other, tag, window)
                    finally:
                        stop.set()
                        await task
        p95 = {case: _p95(taken) for case, taken in samples.items()}
        assert rotations >= rounds
        print(
            "\nanother user's turn every 0.25 s, p95: "
            + ", ".join(f"{k} {v:.3f} s" for k, v in p95.items())
        )
        for case in ("hanging", "rotating"):
            # 1.5x, with 50 ms for the 20 ms poll and a loaded machine's scheduling
            assert p95[case] <= 1.5 * p95["alone"] + 0.05, p95
    finally:
        fast.stop()
        hanging.stop()


async def test_a_user_who_keeps_changing_their_url_leaves_a_bounded_set_of_clients() -> None:
    """The registry kept one client per URL for good: a user rotating their URL every
    3 s made 28,800 a day. The least recently used beyond ``MAX_USER_ENDPOINTS`` go (the
    connections are the shared pool's); a URL that went still answers when used again."""
    server = ScriptedServer().start()
    registry = ProviderRegistry(allow="127.0.0.0/8")
    try:
        first = registry.endpoint(f"{server.url}/r0/v1", checked=True)
        for n in range(1, MAX_USER_ENDPOINTS + 50):
            registry.endpoint(f"{server.url}/r{n}/v1", checked=True)
        assert registry.user_endpoints == MAX_USER_ENDPOINTS
        newest = f"{server.url}/r{MAX_USER_ENDPOINTS + 49}/v1"
        assert registry.endpoint(newest, checked=True) is registry.endpoint(newest, checked=True)
        assert registry.endpoint(f"{server.url}/r0/v1", checked=True) is not first
        config = ProviderConfig(
            provider="openai", model="m", endpoint_url=f"{server.url}/r0/v1", source="user"
        )
        [vector] = await registry.embedder(config).embed(["tea"])
        assert len(vector) == server.dims
        assert registry.user_endpoints == MAX_USER_ENDPOINTS
    finally:
        await registry.aclose()
        server.stop()
