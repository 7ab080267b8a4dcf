"""The memory tools over MCP, driven by the SDK's own client against a running query
service: streamable HTTP at /mcp and stdio (``engram mcp``), each scoped to its key."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from services.query.app import TOOLBOX
from services.query.tools.memory import MEMORY
from services.query.tools.specs import neutral
from shared.apikeys import create_key
from tests.live import LiveQuery
from tests.support import ROOT

TOOL_NAMES = [t["name"] for t in TOOLBOX.tools]


async def key_for(pool: asyncpg.Pool, user_id: str | None) -> str:
    _, secret = await create_key(pool, user_id=user_id, is_admin=user_id is None)
    return secret


@asynccontextmanager
async def http_client(live: LiveQuery, key: str | None, **headers: str) -> AsyncIterator[Client]:
    if key:
        headers["Authorization"] = f"Bearer {key}"
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{live.url}/mcp", http_client=http)
        async with Client(transport) as client:
            yield client


@asynccontextmanager
async def stdio_client(live: LiveQuery, key: str) -> AsyncIterator[Client]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ENGRAM_API_KEY": key}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engram_cli", "mcp", "--url", live.url],
        env=env,
        cwd=str(ROOT),
    )
    async with Client(params) as client:
        yield client


def payload(result: Any) -> Any:
    assert not result.is_error, result.content
    [block] = result.content
    return json.loads(block.text)


async def exercise(client: Client, marker: str) -> None:
    """Every tool once, as one user, through ``client``."""
    listed = await client.list_tools()
    assert [t.name for t in listed.tools] == TOOL_NAMES
    by_name = {t.name: t for t in listed.tools}
    # the schemas are the ones /v1/tools serves
    assert by_name["memory"].input_schema == neutral(MEMORY)["parameters"]
    assert "token_budget" in by_name["context"].input_schema["properties"]

    added = payload(
        await client.call_tool(
            "memory",
            {
                "operation": "add",
                "type": "fact",
                "content": f"{marker} keeps bees",
                "theme": "home",
            },
        )
    )
    found = payload(await client.call_tool("memory", {"operation": "search", "query": "bees"}))
    assert [r["id"] for r in found["results"]] == [added["id"]]
    got = payload(await client.call_tool("memory", {"operation": "get", "item_id": added["id"]}))
    assert got["content"] == f"{marker} keeps bees"
    themes = payload(await client.call_tool("memory", {"operation": "list_themes"}))
    assert "home" in {t["slug"] for t in themes["themes"]}

    payload(
        await client.call_tool(
            "memory_facts",
            {"action": "save", "category": "location", "key": "home_city", "value": "Bergen"},
        )
    )
    facts = payload(await client.call_tool("memory_facts", {"action": "list"}))
    # every live fact is listed; the seeded memories of type fact have no key
    assert [(f["key"], f["value"]) for f in facts["facts"] if f["key"]] == [("home_city", "Bergen")]

    payload(await client.call_tool("remember", {"content": f"{marker} plays the cello"}))
    recalled = payload(await client.call_tool("recall", {"query": "cello"}))
    assert f"{marker} plays the cello" in json.dumps(recalled)

    ctx = payload(await client.call_tool("context", {"message": "bees", "policy": "summary"}))
    assert ctx["policy"] == "summary"
    episodes = payload(await client.call_tool("episode_recall", {"query": "*"}))
    assert episodes["episodes"] == [] and episodes["mode"] == "full_text"

    archived = payload(
        await client.call_tool("memory", {"operation": "archive", "item_id": added["id"]})
    )
    assert archived["status"] == "archived"

    # a bad call is a tool error the model can read, not a protocol failure
    bad = await client.call_tool("memory", {"operation": "add", "type": "fact"})
    assert bad.is_error and "content" in bad.content[0].text
    unknown = await client.call_tool("nope", {})
    assert unknown.is_error and "unknown tool" in unknown.content[0].text


async def test_http_transport_runs_every_tool(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    user = f"mcp-http-{uuid.uuid4().hex[:8]}"
    async with http_client(live_query, await key_for(pool, user)) as client:
        await exercise(client, "Hx")
    count = await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", user)
    assert count >= 2


async def test_stdio_transport_runs_every_tool(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    user = f"mcp-stdio-{uuid.uuid4().hex[:8]}"
    async with stdio_client(live_query, await key_for(pool, user)) as client:
        await exercise(client, "Sx")
    count = await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", user)
    assert count >= 2


async def test_a_key_never_reaches_another_users_memories(
    live_query: LiveQuery, pool: asyncpg.Pool
) -> None:
    alice, bob = f"mcp-a-{uuid.uuid4().hex[:8]}", f"mcp-b-{uuid.uuid4().hex[:8]}"
    alice_key, bob_key = await key_for(pool, alice), await key_for(pool, bob)
    async with http_client(live_query, alice_key) as a:
        secret = payload(
            await a.call_tool(
                "memory",
                {"operation": "add", "type": "fact", "content": "Alice's locker code is 7311"},
            )
        )
    async with stdio_client(live_query, bob_key) as b_stdio:
        for client in (b_stdio,):
            found = payload(await client.call_tool("memory", {"operation": "search", "query": "*"}))
            assert found["results"] == []
            miss = await client.call_tool("memory", {"operation": "get", "item_id": secret["id"]})
            assert miss.is_error and "7311" not in miss.content[0].text
    async with http_client(live_query, bob_key) as b:
        found = payload(await b.call_tool("memory", {"operation": "search", "query": "locker"}))
        assert found["results"] == []
        miss = await b.call_tool("memory", {"operation": "get", "item_id": secret["id"]})
        assert miss.is_error and "7311" not in miss.content[0].text
        gone = await b.call_tool("memory", {"operation": "archive", "item_id": secret["id"]})
        assert gone.is_error
    # Bob's key cannot act for Alice by naming her
    async with httpx.AsyncClient(base_url=live_query.url) as raw:
        r = await raw.post(
            "/mcp",
            headers={"Authorization": f"Bearer {bob_key}", "X-Engram-User": alice},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        assert r.status_code == 403
    status = await pool.fetchval(
        "SELECT status FROM memory_items WHERE id = $1", uuid.UUID(secret["id"])
    )
    assert status == "active"


async def test_http_needs_a_valid_key(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    async with httpx.AsyncClient(base_url=live_query.url) as raw:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        r = await raw.post("/mcp", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = await raw.post("/mcp", json=body, headers={"Authorization": "Bearer eng_wrong"})
        assert r.status_code == 401 and "unknown or revoked" in r.json()["detail"]
    # an admin key acts for the user it names
    user = f"mcp-adm-{uuid.uuid4().hex[:8]}"
    admin = await key_for(pool, None)
    async with http_client(live_query, admin, **{"X-Engram-User": user}) as client:
        payload(await client.call_tool("remember", {"content": "admin wrote this"}))
    n = await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", user)
    assert n == 1


@pytest.mark.parametrize("how", ["--key-file", "--key"])
async def test_stdio_refuses_a_wrong_key(live_query: LiveQuery, tmp_path: Path, how: str) -> None:
    """The key from a file (or the environment) stays out of the process list;
    ``--key`` still works but warns (issue 29.14)."""
    key_file = tmp_path / "key"
    key_file.write_text("eng_wrong\n")
    given = str(key_file) if how == "--key-file" else "eng_wrong"
    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_API_KEY"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *["-m", "engram_cli", "mcp", "--url", live_query.url, how, given],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert b"unknown or revoked API key" in err
    assert (b"--key shows the key in the process list" in err) == (how == "--key")
    assert out == b""


async def test_http_gives_hostile_arguments_as_tool_errors_no_stream_and_its_own_route(
    live_query: LiveQuery, pool: asyncpg.Pool
) -> None:
    """Issue 29.17: over HTTP a NUL in a tool argument is the
    ``isError`` result stdio gives (not an HTTP 422 the SDK raises on); ``GET /mcp``
    answers 405 at once instead of opening a stream that never sends; requests are
    counted under ``route="/mcp"``."""
    user = f"mcp-nul-{uuid.uuid4().hex[:8]}"
    key = await key_for(pool, user)
    async with http_client(live_query, key) as client:
        # (the SDK's client cannot send a lone surrogate; /v1/tools/call's test has one)
        bad = await client.call_tool("remember", {"content": "tea\u0000"})
        assert bad.is_error, bad.content
        assert "arguments.content must not contain NUL" in bad.content[0].text
    assert await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", user) == 0
    async with httpx.AsyncClient(base_url=live_query.url, timeout=5) as raw:
        r = await raw.get(
            "/mcp",
            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
        )
        assert r.status_code == 405 and "POST" in r.headers["allow"]
        metrics = (await raw.get("/metrics")).text
    assert 'route="/mcp"' in metrics
    assert not [
        line for line in metrics.splitlines() if 'route="unmatched"' in line and "_count" in line
    ]
