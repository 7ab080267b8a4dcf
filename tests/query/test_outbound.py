"""User-supplied endpoints: only addresses the deployment allows (issue 17.2).

Over real HTTP: the query service in-process, a scripted provider on loopback
that records every request it gets, so "refused" also means "never called"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from services.embedder.service import embed_wanted
from services.embedder.settings import EmbedderSettings
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.embeddings.outbound import EndpointRefused, check_endpoint
from shared.embeddings.providers import ProviderRegistry
from shared.streams import Publisher
from tests.embedder.conftest import add_messages
from tests.embedder.scripted import ScriptedServer, Step
from tests.query.helpers import auth
from tests.support import running

SECRET_BODY = "internal-service-secret-4711"


def _body(url: str) -> dict[str, Any]:
    return {"provider": "openai", "endpoint_url": url, "model": "m"}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/v1",
        "http://localhost:{port}/v1",
        "http://[::1]:{port}/v1",
        "http://169.254.169.254/latest",
        "http://10.1.2.3:8080/v1",
        "http://192.168.0.10/v1",
        "http://100.64.0.1/v1",
        "http://0.0.0.0:{port}/v1",
        "http://[::ffff:127.0.0.1]:{port}/v1",
        "http://user:pw@example.com/v1",
        "http://no-such-host.invalid/v1",
    ],
)
async def test_a_user_endpoint_on_a_non_public_address_is_refused_by_default(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str, url: str
) -> None:
    server = ScriptedServer().start()
    try:
        port = server.url.rsplit(":", 1)[1]
        s: QuerySettings = make_settings(
            QuerySettings, embedding_endpoint_allow="", secret_key=SecretStr("k")
        )
        h = await auth(pool, user_id)
        target = url.format(port=port)
        async with running(create_app(s)) as client:
            for method, path in (
                ("POST", "/v1/embeddings/test"),
                ("PUT", "/v1/embeddings/settings"),
            ):
                r = await client.request(method, path, json=_body(target), headers=h)
                assert r.status_code == 422, r.text
                err = r.json()
                assert err["errors"][0]["field"].endswith("endpoint_url"), r.text
            got = await client.get("/v1/embeddings/settings", headers=h)
            assert got.json()["stored"] is False
        assert server.requests == []
    finally:
        server.stop()


async def test_an_allowed_endpoints_error_body_is_not_echoed(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    server = ScriptedServer(default=Step("status", status=404, message=SECRET_BODY)).start()
    try:
        s: QuerySettings = make_settings(
            QuerySettings, embedding_endpoint_allow="127.0.0.1/32", secret_key=SecretStr("k")
        )
        h = await auth(pool, user_id)
        async with running(create_app(s)) as client:
            r = await client.post("/v1/embeddings/test", json=_body(f"{server.url}/v1"), headers=h)
        assert r.status_code == 200
        assert r.json()["ok"] is False
        assert r.json()["error"] == "the endpoint answered HTTP 404"
        assert SECRET_BODY not in r.text
        assert len(server.requests) == 1
    finally:
        server.stop()


async def test_a_stored_endpoint_that_became_refused_is_never_called_by_the_embedder(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: aioredis.Redis, user_id: str
) -> None:
    """Stored while allowed (or resolving elsewhere then): checked again before calls."""
    server = ScriptedServer().start()
    try:
        es: EmbedderSettings = make_settings(
            EmbedderSettings,
            embedding_provider="none",
            embedding_endpoint_allow="",
            secret_key=SecretStr("k"),
        )
        await pool.execute("INSERT INTO users (id) VALUES ($1)", user_id)
        await pool.execute(
            "INSERT INTO embedding_settings (user_id, enabled, provider, endpoint_url, model) "
            "VALUES ($1, true, 'openai', $2, 'm')",
            user_id,
            f"{server.url}/v1",
        )
        [mid] = await add_messages(pool, user_id, ["hello"])
        registry = ProviderRegistry()
        try:
            await embed_wanted(
                pool,
                Publisher(redis, es),
                {user_id: {"message": {mid}}},
                settings=es,
                registry=registry,
            )
        finally:
            await registry.aclose()
        row = await pool.fetchrow(
            "SELECT embedding_state, embedding_error FROM messages WHERE id = $1", mid
        )
        assert row["embedding_state"] == "pending"
        assert "non-public address" in row["embedding_error"]
        assert server.requests == []
    finally:
        server.stop()


async def test_public_addresses_and_configured_exceptions_pass() -> None:
    await check_endpoint("https://8.8.8.8/v1", "")
    await check_endpoint("http://[2606:4700:4700::1111]/v1", "")
    await check_endpoint("http://10.1.2.3:8080/v1", "10.0.0.0/8")
    await check_endpoint("http://127.0.0.1:1/v1", "*")
    await check_endpoint("http://ollama.lan:11434", "ollama.lan")
    with pytest.raises(EndpointRefused):
        await check_endpoint("http://10.1.2.3:8080/v1", "192.168.0.0/16")
    with pytest.raises(EndpointRefused):
        await check_endpoint("ftp://8.8.8.8/", "")
