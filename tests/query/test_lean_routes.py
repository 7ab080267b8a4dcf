"""The checkpoint routes LeanRoutes answers (services/query/api/lean.py) answer every
request as their FastAPI routes do: the same status and body, good input or bad, with
or without a key, for the key's user only."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fastapi import FastAPI

from services.query.api.lean import LeanRoute, LeanRoutes
from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.query.helpers import admin_auth, auth
from tests.support import running

JSON = {"Content-Type": "application/json"}
PUT = "/v1/threads/t1/checkpoints/{}"
QUERY = "/v1/checkpoints/query"
LONG = "x" * 256


def _plain(app: FastAPI) -> FastAPI:
    """The app without LeanRoutes: every request to FastAPI's routes."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not LeanRoutes]
    return app


def _counted(app: FastAPI, served: list[str]) -> FastAPI:
    """Count the requests LeanRoutes answered itself."""
    for m in app.user_middleware:
        if m.cls is LeanRoutes:
            routes: list[LeanRoute] = m.kwargs["routes"]

            def counting(route: LeanRoute) -> LeanRoute:
                async def handler(*args: Any) -> Any:
                    served.append(route.route.path)
                    return await route.handler(*args)

                return dataclasses.replace(route, handler=handler)

            m.kwargs["routes"] = [counting(r) for r in routes]
    return app


def _requests(
    user: dict[str, str], other: dict[str, str], admin: dict[str, str]
) -> list[tuple[str, str, dict[str, str], bytes]]:
    def body(value: Any) -> bytes:
        return json.dumps(value).encode()

    put = body({"state": {"v": 1}, "checkpoint_ns": ""})
    user_json = {**user, **JSON}
    return [
        # the happy path: saved, saved again (an update), a child, read back
        ("PUT", PUT.format("a"), user_json, put),
        ("PUT", PUT.format("a"), user_json, body({"state": {"v": 2}})),
        ("PUT", PUT.format("b"), user_json, body({"state": {"v": 3}, "parent_id": "a"})),
        ("PUT", PUT.format("c%2Fd"), user_json, body({"state": {}, "agent_id": "x"})),
        ("POST", QUERY, user_json, body({"thread_id": "t1", "limit": 1, "writes": True})),
        ("POST", QUERY, user_json, body({"contains": {"v": 2}})),
        ("POST", QUERY, user_json, body({"thread_id": "t1", "before": "b", "limit": 5})),
        ("POST", QUERY, {**user, "Content-Type": "application/json; charset=utf-8"}, b"{}"),
        # the caller: no key, not a bearer, an unknown key, another user, an admin
        ("PUT", PUT.format("a"), JSON, put),
        ("PUT", PUT.format("a"), {"Authorization": "Basic abc", **JSON}, put),
        ("POST", QUERY, {"Authorization": "Bearer eng_nobody", **JSON}, b"{}"),
        ("PUT", PUT.format("a"), {**user_json, "X-Engram-User": "someone-else"}, put),
        ("POST", QUERY, {**other, **JSON}, body({"thread_id": "t1"})),
        ("POST", QUERY, {**admin, **JSON}, b"{}"),
        # the body: not JSON, not sent as JSON, empty, extra, wrong types, too long
        ("PUT", PUT.format("a"), user_json, b"{not json"),
        ("PUT", PUT.format("a"), {**user, "Content-Type": "text/plain"}, put),
        ("PUT", PUT.format("a"), user_json, b""),
        ("PUT", PUT.format("a"), user_json, body({"state": {}, "extra": 1})),
        ("PUT", PUT.format("a"), user_json, body({"state": [1]})),
        ("PUT", PUT.format("a"), user_json, body({"state": {}, "checkpoint_ns": LONG})),
        ("PUT", PUT.format("a"), user_json, body({"state": {}, "parent_id": ""})),
        ("PUT", PUT.format(LONG), user_json, put),
        ("PUT", f"/v1/threads/{LONG}/checkpoints/a", user_json, put),
        ("PUT", PUT.format("a"), user_json, body({"state": {"t": "a\u0000b"}})),
        ("PUT", PUT.format("a"), user_json, b'{"state": {"n": NaN}}'),
        ("POST", QUERY, user_json, body({"limit": 0})),
        ("POST", QUERY, user_json, body({"limit": 1001})),
        ("POST", QUERY, user_json, body({"contains": [1]})),
        ("POST", QUERY, user_json, body({"thread": "t1"})),
        ("POST", QUERY, user_json, b"[]"),
        # what the service refuses: another namespace, its own parent
        ("PUT", PUT.format("a"), user_json, body({"state": {}, "checkpoint_ns": "sub"})),
        ("PUT", PUT.format("e"), user_json, body({"state": {}, "parent_id": "e"})),
        # other methods on the paths: FastAPI's answer
        ("GET", PUT.format("a"), user, b""),
        ("GET", QUERY, user, b""),
    ]


async def test_the_lean_routes_answer_as_fastapi_does(make_settings, pool, user_id):
    user = await auth(pool, user_id)
    other = await auth(pool, f"{user_id}-other")
    admin = await admin_auth(pool)
    served: list[str] = []
    plain = _plain(create_app(make_settings(QuerySettings)))
    lean = _counted(create_app(make_settings(QuerySettings)), served)
    answers: list[tuple[str, int, Any, int, Any]] = []
    async with running(plain) as p, running(lean) as q:
        for method, path, headers, content in _requests(user, other, admin):
            # each request to FastAPI's route first, then to the lean one: a put stores
            # the same row twice (its answer is the same), a query reads the same rows
            a = await p.request(method, path, headers=headers, content=content)
            b = await q.request(method, path, headers=headers, content=content)
            name = f"{method} {path[:60]} {content[:60]!r}"
            answers.append((name, a.status_code, _body(a), b.status_code, _body(b)))
    different = [x for x in answers if x[1:3] != x[3:5]]
    assert different == []
    statuses = [x[1] for x in answers]
    assert statuses.count(200) == 8 and {401, 403, 400, 422} <= set(statuses)
    # LeanRoutes answered what validated (the rest went to FastAPI's routes)
    assert served.count("/v1/threads/{thread_id}/checkpoints/{checkpoint_id}") == 5
    assert served.count(QUERY) == 5


def _body(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
