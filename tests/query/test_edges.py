"""The API's edges: body limit (413), size limits that name the field without echoing
it, the Bearer scheme and error answers in the OpenAPI, offline docs assets."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.query.helpers import auth, resolver_for
from tests.support import running


@pytest.fixture
async def client(make_settings) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(QuerySettings, max_request_bytes=100_000)
    async with running(create_app(settings, resolver=resolver_for(None))) as c:
        yield c


async def test_a_body_over_the_limit_gets_413_before_it_is_parsed(client, pool, user_id):
    h = await auth(pool, user_id)
    big = "x" * 200_000
    r = await client.post("/v1/memory/add", headers=h, json={"type": "fact", "content": big})
    assert r.status_code == 413
    assert r.json()["error"] == "payload_too_large" and "100000 bytes" in r.json()["detail"]
    assert len(r.content) < 300

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"type": "fact", "content": "'
        for _ in range(30):
            yield b"y" * 10_000
        yield b'"}'

    r = await client.post("/v1/memory/add", headers=h, content=chunks())
    assert r.status_code == 413 and len(r.content) < 300
    # under the limit still works; nothing was stored by the refused ones
    r = await client.post("/v1/memory/add", headers=h, json={"type": "fact", "content": "ok"})
    assert r.status_code == 200
    found = await client.post("/v1/memory/search", headers=h, json={"query": "*"})
    assert len(found.json()["results"]) == 1


async def test_validation_names_the_field_and_never_echoes_the_value(client, pool, user_id):
    h = await auth(pool, user_id)
    long = "secret-" + "z" * 60_000
    r = await client.post("/v1/memory/add", headers=h, json={"type": "fact", "content": long})
    assert r.status_code == 422
    body = r.json()
    assert body["error"] == "invalid_request"
    assert body["errors"] == [
        {
            "field": "content",
            "message": "String should have at most 20000 characters",
            "type": "string_too_long",
        }
    ]
    assert "secret-" not in r.text and len(r.content) < 500
    r = await client.post(
        "/v1/remember", headers=h, json={"facts": [{"content": long, "subjects": ["x"]}]}
    )
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "facts.0.content"
    assert "secret-" not in r.text
    r = await client.post("/v1/facts", headers=h, json={"category": "a", "key": "b", "value": long})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "value"
    r = await client.get("/v1/episodes", headers=h, params={"limit": "many"})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "limit"
    assert "many" not in r.text


async def test_openapi_declares_bearer_auth_and_the_error_answers(client):
    spec = (await client.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "engram API key",
        "description": spec["components"]["securitySchemes"]["apiKey"]["description"],
    }
    add = spec["paths"]["/v1/memory/add"]["post"]
    assert add["security"] == [{"apiKey": []}]
    for status in ("401", "403", "413", "422"):
        ref = add["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref == "#/components/schemas/ErrorOut", status
    assert "input" not in spec["components"]["schemas"]["FieldError"]["properties"]
    # a key (issue 29.14), no body: 401 claimed, no 413
    listing = spec["paths"]["/v1/tools"]["get"]["responses"]
    assert "401" in listing and "413" not in listing and "422" in listing  # ?format=
    me = spec["paths"]["/v1/me"]["get"]["responses"]
    assert sorted(me) == ["200", "401", "403", "503"]  # 503: PostgreSQL unreachable (faults)
    assert "/mcp" not in spec["paths"]


async def test_docs_pages_use_the_services_own_assets(client):
    for page, script in (("/docs", "/static-offline-docs/"), ("/redoc", '"/redoc.js"')):
        html = (await client.get(page)).text
        assert "cdn" not in html.lower() and script in html, page
    # ReDoc's bundle with its logo served here too (routes/assets.py)
    assert b"cdn.redoc.ly" not in (await client.get("/redoc.js")).content
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        r = await client.get(f"/static-offline-docs/{asset}")
        assert r.status_code == 200 and len(r.content) > 100_000, asset


async def test_a_turn_over_the_size_limit_is_refused_by_the_event_model():
    from pydantic import ValidationError

    from shared.events import MAX_TURN_CHARS, TurnReceived

    base = {"user_id": f"u-{uuid.uuid4().hex[:6]}", "provider": "t", "chat_id": "c", "role": "user"}
    TurnReceived.model_validate({**base, "content": "a" * MAX_TURN_CHARS})
    with pytest.raises(ValidationError) as exc:
        TurnReceived.model_validate({**base, "content": "a" * (MAX_TURN_CHARS + 1)})
    assert exc.value.errors()[0]["loc"] == ("content",)
