"""No 5xx for any input (issue 17.6): hostile text, huge integers, foreign ids,
the error schema, and 503 + Retry-After while PostgreSQL or Redis is unreachable.

Real query service in-process over real PostgreSQL and Redis; for the outages a
TCP proxy between the service and each store is cut and restored."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic import SecretStr

from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.proxy import proxied, through
from tests.query.helpers import auth
from tests.support import running

HOSTILE = [
    ("POST", "/v1/memory/add", {"content": "a\u0000b"}, "content"),
    ("POST", "/v1/remember", {"content": "tea", "subjects": ["x\u0000"]}, "subjects.0"),
    ("POST", "/v1/memory/search", {"query": "\ud800"}, "query"),
    ("POST", "/v1/threads/t/checkpoints", {"state": {"k": "\udfff"}}, "state.k"),
    ("POST", "/v1/threads/t/checkpoints", {"state": {"k\u0000": 1}}, "state.<key>"),
    ("POST", "/v1/threads/t/checkpoints", {"state": {}, "step": 2**31}, "step"),
    ("POST", "/v1/threads/t/checkpoints", {"state": {"n": 2**64}}, "state.n"),
    ("POST", "/v1/facts", {"category": "a", "key": "k", "value": "v\u0000"}, "value"),
    ("POST", "/v1/decisions", {"description": "Use tea\u0000"}, "description"),
    ("GET", "/v1/facts?offset=9223372036854775808", None, "offset"),
    ("GET", "/v1/facts?search=%00", None, "search"),
    ("GET", "/v1/memory/items/%00", None, "path"),
]


async def test_hostile_input_is_422_naming_the_field(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    h = await auth(pool, user_id)
    async with running(create_app(make_settings(QuerySettings))) as client:
        for method, path, body, field in HOSTILE:
            # ASCII JSON: lone surrogates travel as \ud800 escapes, as a client sends them
            content = json.dumps(body) if body is not None else None
            r = await client.request(
                method, path, content=content, headers={**h, "Content-Type": "application/json"}
            )
            assert r.status_code == 422, (path, body, r.status_code, r.text)
            err = r.json()
            assert err["error"] == "invalid_request", r.text
            assert field in err["detail"] or field in str(err.get("errors")), (field, r.text)
            assert "\\u0000" not in r.text and "\\ud800" not in r.text


async def test_foreign_ids_are_404_exactly_like_unknown_ones(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    other = f"{user_id}-other"
    await pool.execute("INSERT INTO users (id) VALUES ($1), ($2)", user_id, other)
    theirs = uuid.uuid4()
    await pool.execute(
        "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
        "VALUES ($1, $2, 'tg', 'their-chat', now(), now())",
        theirs,
        other,
    )
    h = await auth(pool, user_id)
    async with running(create_app(make_settings(QuerySettings))) as client:
        answers = []
        for episode in (theirs, uuid.uuid4()):
            r = await client.post(
                "/v1/decisions",
                json={"description": "Use PostgreSQL for storage", "episode_id": str(episode)},
                headers=h,
            )
            assert r.status_code == 404, r.text
            answers.append(r.json()["detail"].replace(str(episode), "<id>"))
        assert answers[0] == answers[1]
        r = await client.post(
            "/v1/decisions",
            json={"description": "Use Redis", "provider": "tg", "chat_id": "their-chat"},
            headers=h,
        )
        assert r.status_code == 404, r.text
        assert (
            await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", user_id)
            == 0
        )


async def test_every_v1_error_is_documented_with_the_error_schema(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    async with running(create_app(make_settings(QuerySettings))) as client:
        spec = (await client.get("/openapi.json")).json()
        r = await client.get("/v1/no-such-route", headers=await auth(pool, user_id))
        r401 = await client.get("/v1/me")
    assert "ErrorOut" in spec["components"]["schemas"]
    for path, ops in spec["paths"].items():
        if path.startswith("/v1/"):
            for op in ops.values():
                if op.get("security"):
                    assert "503" in op["responses"], path
                for code, answer in op["responses"].items():
                    if code.startswith(("4", "5")):
                        ref = answer["content"]["application/json"]["schema"]
                        assert ref == {"$ref": "#/components/schemas/ErrorOut"}, (path, code)
    assert r.status_code == 404 and set(r.json()) == {"error", "detail"}
    assert r401.status_code == 401 and r401.json()["error"] == "unauthorized"


@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_503_with_retry_after_while_a_store_is_unreachable(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str, store: str
) -> None:
    base: QuerySettings = make_settings(QuerySettings)
    field = "database_url" if store == "postgres" else "redis_url"
    url = getattr(base, field).get_secret_value()
    proxy = await proxied(url).start()
    s: QuerySettings = make_settings(QuerySettings, **{field: SecretStr(through(url, proxy))})
    h = await auth(pool, user_id)
    calls = [
        ("POST", "/v1/memory/add", {"content": "tea at five", "type": "fact"}),
        ("POST", "/v1/memory/search", {"query": "tea"}),
        ("POST", "/v1/remember", {"content": "I like tea"}),
        ("GET", "/v1/facts", None),
    ]
    try:
        async with running(create_app(s)) as client:
            for method, path, body in calls:
                r = await client.request(method, path, json=body, headers=h)
                assert r.status_code < 300, r.text
            await proxy.cut()
            codes = []
            for method, path, body in calls:
                if body and "content" in body:  # said again it would only confirm (no events)
                    body = {**body, "content": body["content"] + " with lemon"}
                r = await client.request(method, path, json=body, headers=h)
                codes.append(r.status_code)
                assert r.status_code < 500 or r.status_code == 503, (path, r.status_code, r.text)
                if r.status_code == 503:
                    assert int(r.headers["retry-after"]) > 0
                    assert r.json()["error"] == "unavailable"
            assert 503 in codes
            health = await client.get("/health")
            assert health.status_code == 503
            await proxy.restore()
            for method, path, body in calls:
                r = await client.request(method, path, json=body, headers=h)
                assert r.status_code < 300, (path, r.text)
    finally:
        await proxy.cut()


def _nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


async def test_deep_json_tool_arguments_as_strings_and_forms_are_4xx_naming_the_field(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 29.5: tool arguments sent as a JSON string pass the same check as a body;
    1,000 levels of nesting is a 422, not a RecursionError; JSON nested past the bound
    in Jarvus ``details`` or a checkpoint ``state`` is refused at write time (so no
    stored row can break a read); forms (urlencoded and multipart) with NUL or a lone
    surrogate are 422. None of it is a 5xx."""
    h = await auth(pool, user_id)
    j = {**h, "Content-Type": "application/json"}
    app = create_app(make_settings(QuerySettings))
    async with running(app) as client:
        for name, args in [
            ("memory", {"operation": "add", "content": "a\u0000b", "type": "fact"}),
            ("remember", {"content": "tea\u0000"}),
            ("memory_facts", {"action": "save", "category": "c", "key": "k", "value": "\ud800"}),
        ]:
            r = await client.post(
                "/v1/tools/call", json={"name": name, "arguments": json.dumps(args)}, headers=h
            )
            assert r.status_code == 200, r.text
            assert r.json()["is_error"] is True, r.text
            assert "arguments." in r.json()["error"], r.text
        raw = '{"name": "memory", "arguments": ' + json.dumps(_nested(1000)) + "}"
        r = await client.post("/v1/tools/call", content=raw, headers=j)
        assert r.status_code == 200 and r.json()["is_error"] is True, r.text
        assert "nested deeper" in r.json()["error"]
        for path, body, field in [
            ("/v1/tools/call", '{"name": "memory", "arguments": ' + _nested(1000) + "}", "body"),
            ("/v1/threads/t/checkpoints", '{"state": ' + _nested(300) + "}", "state"),
            ("/v1/jarvus/actions", '{"action": "x", "details": ' + _nested(300) + "}", "details"),
            ("/v1/memory/add", "[" * 100_000 + "]" * 100_000, "body"),
        ]:
            r = await client.post(path, content=body, headers=j)
            assert r.status_code == 422, (path, r.status_code, r.text[:300])
            assert r.json()["errors"][0]["field"].startswith(field), (path, r.text[:300])
            assert "nested deeper than 64 levels" in r.text
        # what was refused was not stored: the thread's checkpoints still read
        r = await client.get("/v1/threads/t/checkpoints", headers=h)
        assert r.status_code == 200, r.text
        cookie = {"Origin": "http://test", "Cookie": f"engram_key={h['Authorization'][7:]}"}
        for value, problem in [(b"a\x00b", "NUL"), (b"\xed\xa0\x80", "surrogate")]:
            r = await client.post(
                "/ui/settings/save",
                files={"provider": (None, b"openai"), "model": (None, value)},
                headers=cookie,
            )
            assert r.status_code == 422 and "model" in r.text and problem in r.text, r.text
            r = await client.post(
                "/ui/login",
                content=b"key=" + "".join(f"%{b:02X}" for b in value).encode(),
                headers={**cookie, "Content-Type": "application/x-www-form-urlencoded"},
            )
            assert r.status_code == 422 and "key" in r.text, r.text
        metrics = (await client.get("/metrics")).text
        assert 'status="5xx"' not in metrics
        assert 'engram_http_server_errors_total{route="unmatched"} 0.0' in metrics


async def test_invalid_json_names_the_body_not_a_byte_offset(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 29.18: a body that is not JSON is a 422 whose field is ``body``."""
    h = {**await auth(pool, user_id), "Content-Type": "application/json"}
    async with running(create_app(make_settings(QuerySettings))) as client:
        r = await client.post("/v1/memory/add", content=b'{"content": "x",', headers=h)
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == ["body"], r.text
    assert "not valid JSON" in r.json()["detail"]


async def test_an_unhandled_error_is_a_500_with_the_error_body_counted_in_metrics(
    make_settings: Callable[..., Any],
) -> None:
    """Issue 29.6: the one error handler answers what a route raises with the error
    body and counts it on ``engram_http_server_errors_total`` by route; the request
    histogram counts it as a 5xx too (the alert reads both)."""
    app = create_app(make_settings(QuerySettings))

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/v1/boom", boom, methods=["GET"])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            r = await client.get("/v1/boom")
            assert r.status_code == 500
            assert r.json()["error"] == "internal_error" and "a bug" not in r.text
            metrics = (await client.get("/metrics")).text
    assert 'engram_http_server_errors_total{route="/v1/boom"} 1.0' in metrics
    assert (
        'engram_http_request_seconds_count{method="GET",route="/v1/boom",status="5xx"} 1.0'
        in metrics
    )
