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
