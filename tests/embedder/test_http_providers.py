"""The embedder against a scripted OpenAI-compatible / Ollama server on loopback,
through the real use case and real PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from services.embedder import service
from services.embedder.settings import EmbedderSettings
from shared.embeddings import ProviderSettingsIn, put_provider_settings, store
from shared.embeddings.guard import default_guards
from shared.embeddings.providers import ProviderRegistry
from shared.embeddings.store import message_text
from shared.events import EmbedRequested, EmbedTarget
from shared.streams import Publisher
from tests.embedder.conftest import add_messages
from tests.embedder.scripted import ScriptedServer, Step, vector_for

PROVIDERS = ["openai", "ollama"]


async def configure(
    pool: asyncpg.Pool,
    user_id: str,
    settings: EmbedderSettings,
    server: ScriptedServer,
    provider: str,
) -> None:
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider=provider,
            endpoint_url=server.base_url(provider),
            model="scripted-embed",
        ),
        settings,
    )


async def run(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    settings: EmbedderSettings,
    user_id: str,
    ids: list[int],
    registry: ProviderRegistry,
) -> None:
    event = EmbedRequested(
        user_id=user_id, targets=[EmbedTarget(kind="message", id=str(i)) for i in ids]
    )
    result = await service.handle_requests(
        pool,
        Publisher(redis, settings),
        [event],
        settings=settings,
        registry=registry,
    )
    await default_guards().settle()  # calls out of line ended
    assert result.refused == {}


async def states(pool: asyncpg.Pool, ids: list[int]) -> list[asyncpg.Record]:
    return await pool.fetch(
        """
        SELECT id, embedding_state, embedding_error, embedding_provider, embedding_model,
               embedding_dims, embedding, embedding_retry_at
        FROM messages WHERE id = ANY($1::bigint[]) ORDER BY id
        """,
        ids,
    )


@pytest.fixture
async def registry(esettings: EmbedderSettings) -> Any:
    reg = ProviderRegistry.from_settings(esettings)
    yield reg
    await reg.aclose()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_vectors_are_stored_zero_padded_and_rows_become_ready(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    texts = [f"text number {i}" for i in range(6)]
    ids = await add_messages(pool, user_id, texts)
    await run(pool, redis, esettings, user_id, ids, registry)
    rows = await states(pool, ids)
    assert [r["embedding_state"] for r in rows] == ["ready"] * 6
    for r, text in zip(rows, texts, strict=True):
        vec = r["embedding"].to_list()
        assert len(vec) == 384 and r["embedding_dims"] == 8
        at = await pool.fetchval("SELECT occurred_at FROM messages WHERE id = $1", r["id"])
        embedded = message_text(text, "user", None, None, None, at=at)  # "<date> user: <text>"
        assert vec[:8] == pytest.approx(vector_for(embedded, 8), abs=1e-6)
        assert vec[8:] == [0.0] * 376
        assert (r["embedding_provider"], r["embedding_model"]) == (provider, "scripted-embed")
    # batch size 4: six texts in two provider calls
    assert sorted(len(b["input"]) for _, b, _ in server.requests) == [2, 4]
    path = "/v1/embeddings" if provider == "openai" else "/api/embed"
    assert {p for p, _, _ in server.requests} == {path}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_429_is_retried_then_succeeds(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    server.then(Step("status", status=429, message="slow down"))
    ids = await add_messages(pool, user_id, ["hello there"])
    await run(pool, redis, esettings, user_id, ids, registry)
    assert [r["embedding_state"] for r in await states(pool, ids)] == ["ready"]
    assert len(server.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_repeated_500_puts_rows_in_error_with_the_status_not_the_body(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    server.default = Step("status", status=500, message="input is too large to process")
    ids = await add_messages(pool, user_id, ["a very long text"])
    await run(pool, redis, esettings, user_id, ids, registry)
    [row] = await states(pool, ids)
    assert row["embedding_state"] == "error"
    # the kind of failure and its status; the body is logged, never stored (issue 29.9)
    assert row["embedding_error"] == "the endpoint answered HTTP 500"
    assert row["embedding"] is None
    assert len(server.requests) == 3  # one call and two retries


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_one_refused_text_does_not_take_its_batch_down(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    ids = await add_messages(pool, user_id, ["good one", "good two", "good three"])
    # every request holding "good three" is refused: the batch, then the half with it,
    # then the text alone; the halves may be sent in either order
    server.refuse = "good three"
    await run(pool, redis, esettings, user_id, ids, registry)
    rows = await states(pool, ids)
    assert [r["embedding_state"] for r in rows] == ["ready", "ready", "error"]
    assert rows[2]["embedding_error"] == "the endpoint answered HTTP 400"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_vectors_longer_than_the_column_are_an_error_with_the_reason(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    server.default = Step("dims", dims=1024)
    ids = await add_messages(pool, user_id, ["too wide"])
    await run(pool, redis, esettings, user_id, ids, registry)
    [row] = await states(pool, ids)
    assert row["embedding_state"] == "error"
    assert "returned 1024 dimensions but the vector column holds 384" in row["embedding_error"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_timeout_is_retried_within_the_call(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    server.then(Step("sleep", seconds=1.5))
    ids = await add_messages(pool, user_id, ["slow at first"])
    await run(pool, redis, esettings, user_id, ids, registry)
    assert [r["embedding_state"] for r in await states(pool, ids)] == ["ready"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_provider_that_stays_down_leaves_rows_pending_then_they_are_retried(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    provider: str,
) -> None:
    await configure(pool, user_id, esettings, server, provider)
    server.default = Step("sleep", seconds=1.5)  # every call times out
    ids = await add_messages(pool, user_id, ["waiting", "for the provider"])
    await run(pool, redis, esettings, user_id, ids, registry)
    rows = await states(pool, ids)
    assert [r["embedding_state"] for r in rows] == ["pending"] * 2
    assert all(r["embedding_error"] == "the endpoint did not answer in time" for r in rows)
    assert all(r["embedding_retry_at"] is not None for r in rows)

    server.default = Step("ok")  # the provider is back
    await asyncio.sleep(0.3)  # past the first backoff (0.2 s)
    publisher = Publisher(redis, esettings)
    await service.retry_due(pool, publisher, settings=esettings, registry=registry)
    await default_guards().settle()  # calls out of line ended
    rows = await states(pool, ids)
    assert [r["embedding_state"] for r in rows] == ["ready"] * 2
    assert all(r["embedding_error"] is None and r["embedding_retry_at"] is None for r in rows)


async def test_a_refused_connection_also_leaves_rows_pending(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="openai",
            endpoint_url="http://127.0.0.1:9/v1",
            model="nothing-listens",
        ),
        esettings,
    )
    ids = await add_messages(pool, user_id, ["nobody home"])
    await run(pool, redis, esettings, user_id, ids, registry)
    [row] = await states(pool, ids)
    assert row["embedding_state"] == "pending"
    assert row["embedding_error"] == "cannot connect to the endpoint"


async def test_the_api_key_is_sent_as_a_bearer_token(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    from pydantic import SecretStr

    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="openai",
            endpoint_url=server.base_url("openai"),
            model="m",
            api_key=SecretStr("sk-live-123"),
        ),
        esettings,
    )
    ids = await add_messages(pool, user_id, ["with a key"])
    await run(pool, redis, esettings, user_id, ids, registry)
    headers = {k.lower(): v for k, v in server.requests[0][2].items()}
    assert headers["authorization"] == "Bearer sk-live-123"


async def test_a_request_naming_another_users_rows_embeds_nothing_of_theirs(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    await configure(pool, user_id, esettings, server, "openai")
    other = user_id + "-other"
    await configure(pool, other, esettings, server, "openai")
    theirs = await add_messages(pool, other, ["not yours"])
    await run(pool, redis, esettings, user_id, theirs, registry)
    assert [r["embedding_state"] for r in await states(pool, theirs)] == ["pending"]
    assert server.requests == []


async def test_malformed_target_ids_are_rejected_with_a_reason(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    event = EmbedRequested(user_id=user_id, targets=[EmbedTarget(kind="memory", id="nope")])
    ok = EmbedRequested(user_id=user_id, targets=[])
    result = await service.handle_requests(
        pool,
        Publisher(redis, esettings),
        [ok, event],
        settings=esettings,
        registry=registry,
    )
    await default_guards().settle()  # calls out of line ended
    assert list(result.refused) == [1]  # named by its position in the batch
    assert "not a valid id" in result.refused[1]


def test_a_turn_is_embedded_with_its_date_and_speaker() -> None:
    from datetime import UTC, datetime

    at = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert message_text("I went hiking", "user", None, None, None, speaker="Ann", at=at) == (
        "08 May 2023 Ann: I went hiking"
    )
    # no display name: the role speaks; a tool turn keeps its own shape
    assert message_text("Sunny", "assistant", None, None, None, at=at) == (
        "08 May 2023 assistant: Sunny"
    )
    assert message_text("", "tool", "weather", {"city": "Oslo"}, None, speaker="x", at=at) == (
        'tool weather: args: {"city": "Oslo"}'
    )


async def _age(pool: asyncpg.Pool, ids: list[int]) -> None:
    """As if the rows were stored long ago (and first in the sweep's order)."""
    await pool.execute(
        "UPDATE messages SET created_at = '2000-01-01' WHERE id = ANY($1::bigint[])", ids
    )


async def test_the_sweep_embeds_a_row_whose_request_was_lost(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    """Pending, never tried, no retry time, older than embed_orphan_after_s: no request
    names it any more (dead-lettered, lost), so the sweep takes it; a younger row is
    left to its request."""
    await configure(pool, user_id, esettings, server, "openai")
    lost = await add_messages(pool, user_id, ["my request was dead-lettered"])
    young = await add_messages(pool, user_id, ["my request is on its way"])
    await _age(pool, lost)
    publisher = Publisher(redis, esettings)
    await service.retry_due(pool, publisher, settings=esettings, registry=registry)
    await default_guards().settle()  # calls out of line ended
    assert [r["embedding_state"] for r in await states(pool, lost)] == ["pending"]
    await service.retry_due(pool, publisher, settings=esettings, registry=registry, orphans=True)
    await default_guards().settle()  # calls out of line ended
    assert [r["embedding_state"] for r in await states(pool, lost)] == ["ready"]
    assert [r["embedding_state"] for r in await states(pool, young)] == ["pending"]


async def test_the_sweep_parks_the_rows_of_a_user_without_a_provider(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    """A full-text-only user's rows wait for a provider: the sweep finds them once,
    says why they wait, and never looks at them again (a rebuild resets them)."""
    ids = await add_messages(pool, user_id, ["no provider here"])
    await _age(pool, ids)
    publisher = Publisher(redis, esettings)
    await service.retry_due(pool, publisher, settings=esettings, registry=registry, orphans=True)
    await default_guards().settle()  # calls out of line ended
    [row] = await pool.fetch(
        "SELECT embedding_state, embedding_attempts, embedding_retry_at, embedding_error "
        "FROM messages WHERE id = $1",
        ids[0],
    )
    assert row["embedding_state"] == "pending" and row["embedding_retry_at"] is None
    assert row["embedding_attempts"] == 1
    assert row["embedding_error"] == service.NO_PROVIDER
    found = await store.orphans(pool, "message", older_than_s=60, limit=100_000)
    assert (user_id, ids[0]) not in found


async def test_after_redis_comes_back_the_sweep_takes_lost_requests_at_once(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
    tmp_path: Any,
) -> None:
    """Issue 29.12: a restarted Redis (a new run_id) or one the sweep could not reach
    is noticed once; the sweep then takes rows pending for a few seconds, not the
    orphan age (10 minutes), so a request lost on the restart is embedded at once."""
    from engram_cli.embedded import EmbeddedRedis, free_port
    from services.embedder.restarts import AFTER_RESTART_S, RedisRestarts

    own = EmbeddedRedis(tmp_path / "redis", port=free_port())
    url = own.start(persistent=False)
    client = aioredis.from_url(url)
    restarts = RedisRestarts()
    try:
        assert not await restarts.came_back(client)
        assert not await restarts.came_back(client)
        own.stop()
        assert not await restarts.came_back(client)  # away: nothing to do yet
        own.start(persistent=False)
        # back (after an outage, a new run): noticed by the next sweep or the one after
        # (the first may still meet the connection the stop closed)
        assert await restarts.came_back(client) or await restarts.came_back(client)
        assert not await restarts.came_back(client)
        own.stop()
        own.start(persistent=False)
        # a restart between two sweeps: the first call may meet the closed connection
        # (away), the next one sees the new run either way
        assert await restarts.came_back(client) or await restarts.came_back(client)
    finally:
        await client.aclose()
        own.stop()

    await configure(pool, user_id, esettings, server, "openai")
    lost = await add_messages(pool, user_id, ["my request went with the restart"])
    await pool.execute(
        "UPDATE messages SET created_at = now() - interval '30 seconds' WHERE id = $1", lost[0]
    )
    publisher = Publisher(redis, esettings)
    await service.retry_due(pool, publisher, settings=esettings, registry=registry, orphans=True)
    assert [r["embedding_state"] for r in await states(pool, lost)] == ["pending"]
    # the sweep after a restart takes it at once (its call runs out of line: a busy
    # machine may defer it to the next sweeps, seconds later, never the 10 minutes of age).
    # The sweep reads every user's rows, and this worker's database holds what earlier
    # test modules left pending: a sweep may spend seconds on those first, so the test
    # gives it 60 s of sweeps a quarter second apart, still far from the 10 minutes.
    deadline = asyncio.get_running_loop().time() + 60
    while asyncio.get_running_loop().time() < deadline:
        await service.retry_due(
            pool,
            publisher,
            settings=esettings,
            registry=registry,
            orphans=True,
            orphan_age_s=AFTER_RESTART_S,
        )
        await default_guards().settle()  # calls out of line ended
        if [r["embedding_state"] for r in await states(pool, lost)] == ["ready"]:
            break
        await asyncio.sleep(0.25)
    row = await pool.fetchrow(
        "SELECT embedding_state, embedding_attempts, embedding_retry_at, embedding_error,"
        " created_at FROM messages WHERE id = $1",
        lost[0],
    )
    waiting = await pool.fetchval(
        "SELECT count(*) FROM messages WHERE embedding_state = 'pending'"
        " AND embedding_retry_at IS NULL AND embedding_attempts = 0 AND created_at < $1",
        row["created_at"],
    )
    assert row["embedding_state"] == "ready", (dict(row), f"{waiting} older orphans")


async def test_rows_marked_for_another_model_do_not_crowd_the_sweep_out(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    esettings: EmbedderSettings,
    server: ScriptedServer,
    registry: ProviderRegistry,
    user_id: str,
) -> None:
    """Rows a rebuild marked for another model than the one now configured are not
    written; they are the sweep's oldest orphans, so the sweep parks them (a rebuild
    resets them) instead of reading them first every time: a newer lost request
    behind them is still embedded, with the sweep reading two rows at a time."""
    await configure(pool, user_id, esettings, server, "openai")
    marked = await add_messages(pool, user_id, ["marked one", "marked two", "marked three"])
    await pool.execute(
        "UPDATE messages SET embedding_provider = 'ollama', embedding_model = 'old-model',"
        " created_at = now() - interval '60 seconds' WHERE id = ANY($1::bigint[])",
        marked,
    )
    lost = await add_messages(pool, user_id, ["a request lost behind them"])
    await pool.execute(
        "UPDATE messages SET created_at = now() - interval '30 seconds' WHERE id = $1", lost[0]
    )
    publisher = Publisher(redis, esettings)
    for _ in range(4):
        await service.retry_due(
            pool,
            publisher,
            settings=esettings,
            registry=registry,
            limit=2,
            orphans=True,
            orphan_age_s=5.0,
        )
        await default_guards().settle()  # calls out of line ended
    assert [r["embedding_state"] for r in await states(pool, lost)] == ["ready"]
    rows = await pool.fetch(
        "SELECT embedding_state, embedding_attempts, embedding_error FROM messages"
        " WHERE id = ANY($1::bigint[])",
        marked,
    )
    assert [r["embedding_state"] for r in rows] == ["pending"] * 3  # not written
    assert all(r["embedding_attempts"] == 1 for r in rows)  # parked: out of the sweep
    assert all("another model" in r["embedding_error"] for r in rows)
