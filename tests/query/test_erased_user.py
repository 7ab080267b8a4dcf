"""An erased user stays erased on every write path (issue 17.4): an admin key acting
for the id is refused with 410 on every operation that acts for a user, over MCP
too, no key is made for it, and ``engram users reenable ID`` lifts it.

Real query service in-process over real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from engram_cli import main
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.erasure import audit_hash
from shared.errors import UserErased
from tests.query.helpers import admin_auth
from tests.support import running

# Writes with a body that would be stored for a live user.
WRITES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/memory/add", {"content": "erased users keep nothing", "type": "fact"}),
    ("POST", "/v1/remember", {"memories": [{"content": "erased users keep nothing"}]}),
    ("POST", "/v1/facts", {"category": "c", "key": "k", "value": "v"}),
    ("PUT", "/v1/facts/summary", {"summary": "erased"}),
    ("POST", "/v1/threads/t1/checkpoints", {"step": 1, "state": {"a": 1}}),
    ("POST", "/v1/jarvus/store", {"content": "erased", "type": "fact"}),
    ("POST", "/v1/decisions", {"description": "use postgres"}),
    ("POST", "/v1/people", {"name": "Sarah", "relationship": "wife"}),
    (
        "POST",
        "/v1/tools/call",
        {"name": "memory", "arguments": {"operation": "add", "content": "x", "type": "fact"}},
    ),
]


async def _rows_of(pool: asyncpg.Pool, user_id: str) -> dict[str, int]:
    tables = await pool.fetch(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'user_id' "
        "AND table_schema = current_schema()"
    )
    found = {}
    for t in tables:
        n = await pool.fetchval(
            f'SELECT count(*) FROM "{t["table_name"]}" WHERE user_id = $1', user_id
        )
        if n:
            found[t["table_name"]] = int(n)
    if await pool.fetchval("SELECT count(*) FROM users WHERE id = $1", user_id):
        found["users"] = 1
    return found


async def test_an_admin_acting_for_an_erased_user_is_refused_everywhere_until_reenabled(
    pool: asyncpg.Pool,
    make_settings: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    qs: QuerySettings = make_settings(QuerySettings)
    gone = f"gone-{uuid.uuid4().hex[:8]}"
    async with running(query_app(qs)) as client:
        admin = await admin_auth(pool)
        as_gone = {**admin, "X-Engram-User": gone}
        r = await client.post("/v1/memory/add", headers=as_gone, json=WRITES[0][2])
        assert r.status_code == 200, r.text
        r = await client.delete(f"/v1/users/{gone}", headers=admin)
        assert r.status_code == 200, r.text
        assert await _rows_of(pool, gone) == {}

        # Every operation that acts for a user, whatever its input: 410 before anything.
        schema = (await client.get("/openapi.json")).json()
        refused = 0
        for path, operations in schema["paths"].items():
            for method, op in operations.items():
                if "410" not in op["responses"]:
                    continue
                url = path.replace("{", "").replace("}", "")  # any id will do
                body = {} if "requestBody" in op else None
                r = await client.request(method.upper(), url, headers=as_gone, json=body)
                assert r.status_code == 410, (method, path, r.status_code, r.text)
                assert r.json()["error"] == "gone" and "erased" in r.json()["detail"]
                assert gone not in r.text  # the id is not repeated
                refused += 1
        assert refused >= 40
        # ... and with bodies that a live user's call would store
        for method, path, body in WRITES:
            r = await client.request(method, path, headers=as_gone, json=body)
            assert r.status_code == 410, (path, r.text)
        # ... and over MCP (the same key check)
        r = await client.post(
            "/mcp",
            headers={**as_gone, "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        assert r.status_code == 410 and r.json()["error"] == "gone"
        # ... and no key is made for the id
        with pytest.raises(UserErased):
            await create_key(pool, user_id=gone)
        assert await _rows_of(pool, gone) == {}
        # Admin-wide calls are not acting for the user: unaffected.
        r = await client.post("/v1/admin/search", headers=admin, json={"query": "x"})
        assert r.status_code == 200, r.text

        # engram users reenable ID lifts the tombstone (once; the CLI runs its own loop)
        monkeypatch.setenv("ENGRAM_DATABASE_URL", qs.require_database_url())
        monkeypatch.setenv("ENGRAM_REDIS_URL", qs.require_redis_url())
        assert await asyncio.to_thread(main, ["users", "reenable", gone]) == 0
        assert f"re-enabled user {gone}" in capsys.readouterr().out
        assert await asyncio.to_thread(main, ["users", "reenable", gone]) == 2
        assert "no erased user" in capsys.readouterr().err
        audited = await pool.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = 'reenable' AND entity = 'user' "
            "AND details->>'user_hash' = $1",
            audit_hash(gone),
        )
        assert audited == 1
        r = await client.post("/v1/memory/add", headers=as_gone, json=WRITES[0][2])
        assert r.status_code == 200, r.text
        assert (await _rows_of(pool, gone)).get("memory_items") == 1
