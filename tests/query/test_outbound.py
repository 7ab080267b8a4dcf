"""User-supplied endpoints: only addresses the deployment allows (issue 17.2).

Over real HTTP: the query service in-process, a scripted provider on loopback
that records every request it gets, so "refused" also means "never called"."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from services.embedder.service import embed_wanted
from services.embedder.settings import EmbedderSettings
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.embeddings.providers import ProviderConfig, ProviderRegistry
from shared.guard import Guards
from shared.outbound import EndpointRefused, IpAddress, PinnedTransport, check_endpoint, public
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
        # every IPv6 way of writing a refused address (issue 29.8)
        "http://[::ffff:7f00:1]:{port}/v1",  # IPv4-mapped, in hex
        "http://[::127.0.0.1]:{port}/v1",  # IPv4-compatible
        "http://[::ffff:0:7f00:1]:{port}/v1",  # IPv4-translated
        "http://[64:ff9b::7f00:1]:{port}/v1",  # NAT64 of loopback
        "http://[64:ff9b::a9fe:a9fe]/latest",  # NAT64 of the metadata address
        "http://[64:ff9b:1::a00:1]/v1",  # local-use NAT64
        "http://[2002:7f00:1::1]/v1",  # 6to4 of loopback
        "http://[2002:a00:1::1]/v1",  # 6to4 of 10.0.0.1
        "http://[fec0::1]/v1",  # site-local
        "http://[fd00::1]/v1",  # unique-local
        "http://[fe80::1]/v1",  # link-local
        "http://[ff02::1]/v1",  # multicast
        "http://[::]:{port}/v1",  # unspecified
        "http://[2001:db8::1]/v1",  # documentation
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


async def _stored_endpoint_and_a_turn(pool: asyncpg.Pool, user_id: str, url: str) -> int:
    """The user's endpoint stored as it was once allowed (no check now), and a turn."""
    await pool.execute("INSERT INTO users (id) VALUES ($1)", user_id)
    await pool.execute(
        "INSERT INTO embedding_settings (user_id, enabled, provider, endpoint_url, model) "
        "VALUES ($1, true, 'openai', $2, 'm')",
        user_id,
        url,
    )
    [mid] = await add_messages(pool, user_id, ["hello"])
    return mid


async def _embed_once(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    es: EmbedderSettings,
    registry: ProviderRegistry,
    user_id: str,
    mid: int,
) -> Any:
    """The embedder's handling of one turn, to its end (the call to a user's endpoint
    runs out of line); the row's state and error after it."""
    guards = Guards()
    try:
        await embed_wanted(
            pool,
            Publisher(redis, es),
            {user_id: {"message": {mid}}},
            settings=es,
            registry=registry,
            guards=guards,
        )
        await guards.settle()
    finally:
        await registry.aclose()
    return await pool.fetchrow(
        "SELECT embedding_state, embedding_error FROM messages WHERE id = $1", mid
    )


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
        mid = await _stored_endpoint_and_a_turn(pool, user_id, f"{server.url}/v1")
        row = await _embed_once(pool, redis, es, ProviderRegistry(), user_id, mid)
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
    # IPv6 forms carrying a public IPv4 are that IPv4; a listed network allows its forms
    await check_endpoint("http://[64:ff9b::808:808]/v1", "")
    await check_endpoint("http://[2002:808:808::1]/v1", "")
    await check_endpoint("http://[::ffff:7f00:1]:1/v1", "127.0.0.0/8")


def test_every_ipv6_form_of_a_refused_address_is_refused() -> None:
    for text in (
        "::1",
        "::",
        "::127.0.0.1",
        "::ffff:7f00:1",
        "::ffff:a9fe:a9fe",
        "64:ff9b::a00:1",
        "2002:c0a8:1::1",
        "fec0::1",
        "fc00::1",
        "fe80::1",
        "ff0e::1",
        "2001::1",
        "100::1",
    ):
        assert not public(ipaddress.ip_address(text)), text
    for text in ("2606:4700:4700::1111", "64:ff9b::808:808", "::ffff:8.8.8.8", "8.8.8.8"):
        assert public(ipaddress.ip_address(text)), text


async def test_the_connection_goes_to_the_address_that_was_checked() -> None:
    """DNS rebinding: the name resolves to an allowed address for the check, then to a
    refused one; the request is sent to the checked address (the name is never looked
    up again by the HTTP client), with the name in the Host header."""
    server = ScriptedServer().start()
    answers = [[ipaddress.ip_address("127.0.0.1")], [ipaddress.ip_address("10.9.9.9")]]
    asked: list[str] = []

    async def scripted_dns(host: str, port: int) -> list[IpAddress]:
        asked.append(host)
        return answers[min(len(asked), len(answers)) - 1]

    port = server.url.rsplit(":", 1)[1]
    transport = PinnedTransport("127.0.0.0/8", resolver=scripted_dns)
    try:
        async with httpx.AsyncClient(transport=transport) as client:
            body = {"model": "m", "input": ["x"]}
            r = await client.post(f"http://rebind.example:{port}/v1/embeddings", json=body)
            assert r.status_code == 200
            assert server.requests[0][2]["Host"] == f"rebind.example:{port}"
            with pytest.raises(EndpointRefused, match="10.9.9.9"):
                await client.post(f"http://rebind.example:{port}/v1/embeddings", json=body)
        assert asked == ["rebind.example", "rebind.example"]  # once per request
        assert len(server.requests) == 1
    finally:
        server.stop()


async def test_a_users_endpoint_is_checked_at_call_time_not_only_when_stored() -> None:
    """The registry calls a user's endpoint through the guard, whoever resolved it."""
    server = ScriptedServer().start()
    config = ProviderConfig("openai", "m", endpoint_url=f"{server.url}/v1", source="user")
    registry = ProviderRegistry(allow="")
    try:
        with pytest.raises(EndpointRefused):
            await registry.embedder(config).embed(["hello"])
        assert server.requests == []
        allowed = ProviderRegistry(allow="127.0.0.0/8")
        assert len(await allowed.embedder(config).embed(["hello"])) == 1
        await allowed.aclose()
    finally:
        await registry.aclose()
        server.stop()


async def test_a_test_of_another_url_never_carries_the_stored_api_key(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 29.7: ``api_key`` omitted means the stored one only for the stored URL."""
    stored, other = ScriptedServer().start(), ScriptedServer().start()
    try:
        s: QuerySettings = make_settings(QuerySettings, secret_key=SecretStr("k"))
        h = await auth(pool, user_id)
        async with running(create_app(s)) as client:
            body = {**_body(f"{stored.url}/v1"), "api_key": "sk-stored-4711"}
            r = await client.put("/v1/embeddings/settings", json=body, headers=h)
            assert r.status_code == 200, r.text
            r = await client.post("/v1/embeddings/test", json=_body(f"{other.url}/v1"), headers=h)
            assert r.json()["ok"] is True
            r = await client.post("/v1/embeddings/test", json=_body(f"{stored.url}/v1/"), headers=h)
            assert r.json()["ok"] is True
            # a new URL saved without a key drops the stored key
            r = await client.put(
                "/v1/embeddings/settings", json=_body(f"{other.url}/v1"), headers=h
            )
            assert r.json()["settings"]["has_api_key"] is False
        assert "Authorization" not in other.requests[0][2]
        assert stored.requests[0][2]["Authorization"] == "Bearer sk-stored-4711"
    finally:
        stored.stop()
        other.stop()


@pytest.mark.parametrize(("status", "state"), [(400, "error"), (401, "error"), (503, "pending")])
async def test_a_failing_endpoints_body_is_never_stored_as_the_embedding_error(
    make_settings: Callable[..., Any],
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    user_id: str,
    status: int,
    state: str,
) -> None:
    """Issue 29.9: the row keeps the kind of failure and its status, not the body."""
    server = ScriptedServer(default=Step("status", status=status, message=SECRET_BODY)).start()
    try:
        es: EmbedderSettings = make_settings(
            EmbedderSettings,
            embedding_provider="none",
            embedding_retries=0,
            secret_key=SecretStr("k"),
        )
        mid = await _stored_endpoint_and_a_turn(pool, user_id, f"{server.url}/v1")
        registry = ProviderRegistry.from_settings(es)
        row = await _embed_once(pool, redis, es, registry, user_id, mid)
        assert row["embedding_state"] == state
        assert SECRET_BODY not in row["embedding_error"]
        assert f"HTTP {status}" in row["embedding_error"]
        assert len(row["embedding_error"]) < 200
        assert len(server.requests) == 1
    finally:
        server.stop()
