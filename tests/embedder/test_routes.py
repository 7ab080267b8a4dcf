"""The query service's embedding routes: settings, endpoint test, rebuild with progress."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from pydantic import SecretStr

from services.embedder.settings import EmbedderSettings
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.embeddings.guard import default_guards
from tests.embedder.conftest import add_memories, add_messages
from tests.embedder.scripted import ScriptedServer, Step
from tests.support import running


async def test_settings_test_and_rebuild_through_the_api(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    server: ScriptedServer,
    user_id: str,
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("ENGRAM_EMBEDDING_PROVIDER", "none")
    monkeypatch.setenv("ENGRAM_SECRET_KEY", "route-secret")
    qs: QuerySettings = make_settings(QuerySettings)
    _, secret = await create_key(pool, user_id=user_id)
    auth = {"Authorization": f"Bearer {secret}"}
    await add_messages(pool, user_id, ["one", "two"])
    await add_memories(pool, user_id, ["archived fact"], status="archived")
    async with running(create_app(qs)) as client:
        r = await client.get("/v1/embeddings/settings", headers=auth)
        assert r.status_code == 200 and r.json()["effective_provider"] is None

        body = {
            "provider": "openai",
            "endpoint_url": server.base_url("openai"),
            "model": "scripted",
            "api_key": "sk-abc",
        }
        r = await client.post("/v1/embeddings/test", headers=auth, json=body)
        assert r.status_code == 200, r.text
        assert r.json()["ok"] and r.json()["dimensions"] == 8 and r.json()["fits_column"]

        server.then(*[Step("status", status=401, message="invalid api key")])
        r = await client.post("/v1/embeddings/test", headers=auth, json=body)
        # the kind of failure, not the remote body (issue 17.2)
        assert not r.json()["ok"] and "refused the API key (HTTP 401)" in r.json()["error"]
        assert "invalid api key" not in r.text

        r = await client.put("/v1/embeddings/settings", headers=auth, json=body)
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["rebuild_needed"] and saved["rebuild"]["total"] == 3
        assert saved["settings"]["has_api_key"] and "sk-abc" not in r.text

        r = await client.put(
            "/v1/embeddings/settings", headers=auth, json={"provider": "openai", "model": "x"}
        )
        assert r.status_code == 422 and "endpoint_url" in r.json()["detail"]

        r = await client.post("/v1/embeddings/rebuild", headers=auth)
        assert r.status_code == 202, r.text
        assert (r.json()["total"], r.json()["pending"], r.json()["running"]) == (3, 3, True)
        r = await client.get("/v1/embeddings/rebuild", headers=auth)
        assert r.json()["status"]["done"] == 0 and r.json()["count"]["memories"] == 1

    # the rebuild asked the embedder for all three rows
    entries = await redis.xrange(qs.stream("embed"))
    assert sum(1 for _ in entries) >= 1
    # the stored key is usable by the embedder (same secret): the service embeds them
    from services.embedder import service
    from shared.embeddings.providers import ProviderRegistry
    from shared.events import embed_adapter
    from shared.streams import Publisher

    es: EmbedderSettings = make_settings(
        EmbedderSettings, stream_prefix=qs.stream_prefix, secret_key=SecretStr("route-secret")
    )
    reg = ProviderRegistry.from_settings(es)
    requests = [embed_adapter.validate_json(f[b"event"]) for _, f in entries]
    await service.handle_requests(pool, Publisher(redis, es), requests, settings=es, registry=reg)
    await default_guards().settle()  # calls out of line ended
    await reg.aclose()
    headers = {k.lower(): v for k, v in server.requests[-1][2].items()}
    assert headers["authorization"] == "Bearer sk-abc"
    async with running(create_app(qs)) as client:
        status = (await client.get("/v1/embeddings/rebuild", headers=auth)).json()["status"]
    assert (status["done"], status["total"], status["running"]) == (3, 3, False)
