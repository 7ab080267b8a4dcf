"""The cross-user matrix: user A's ids, threads, chats and words used with user B's
key on every /v1 operation, every tool, and every tool over MCP (the official
SDK's client, streamable HTTP at /mcp); the answer is 403/404 or B's own (empty)
data, never anything of A's, and A's data is unchanged afterwards.

Against the running query service of the chaos stack over real HTTP. A test
fails when an operation appears in the OpenAPI, or a tool in the MCP tool list,
that the matrix does not cover, so a new route or tool gets its row here."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from shared.apikeys import create_key
from shared.db import connect
from tests.chaos.conftest import record

MARK = "zqxsecret"  # in every text of A's, so any echo of A's data is found


async def _seed(url: str, a: str, b: str) -> dict[str, Any]:
    conn = await connect(url)
    try:
        for u in (a, b):
            await conn.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", u)
        episode = uuid.uuid4()
        await conn.execute(
            "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
            "VALUES ($1, $2, 'chaos', 'chat-of-a', now(), now())",
            episode,
            a,
        )
        await conn.execute(
            "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
            "content, occurred_at) VALUES ($1, $2, $3, 'chaos', 'chat-of-a', 'user', $4, now())",
            uuid.uuid4(),
            a,
            episode,
            f"my {MARK} turn about the garden",
        )
        keys = {}
        for u in (a, b):
            _, keys[u] = await create_key(conn, user_id=u)
        return {"episode": str(episode), "keys": keys}
    finally:
        await conn.close()


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code < 300, (r.request.url, r.status_code, r.text)
    out: dict[str, Any] = r.json()
    return out


async def test_user_b_never_gets_or_changes_user_a_data(stack: Any) -> None:
    query = next(i for i in stack.instances if i.service == "query")
    base = f"http://127.0.0.1:{query.port}"
    a, b = f"matrix-a-{uuid.uuid4().hex[:6]}", f"matrix-b-{uuid.uuid4().hex[:6]}"
    seed = await _seed(stack.database_url, a, b)
    ha = {"Authorization": f"Bearer {seed['keys'][a]}"}
    hb = {"Authorization": f"Bearer {seed['keys'][b]}"}
    chat = {"provider": "chaos", "chat_id": "chat-of-a"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        item = _ok(
            await c.post(
                "/v1/memory/add", json={"type": "fact", "content": f"{MARK} one"}, headers=ha
            )
        )["id"]
        stored = _ok(await c.post("/v1/jarvus/store", json={"text": f"{MARK} two"}, headers=ha))
        jarvus_id = stored.get("memory_id") or stored.get("id")
        _ok(
            await c.post(
                "/v1/facts",
                json={"category": "pets", "key": "dog", "value": f"{MARK} rex"},
                headers=ha,
            )
        )
        _ok(await c.put("/v1/facts/summary", json={"summary": f"{MARK} summary"}, headers=ha))
        cp = _ok(
            await c.post(
                "/v1/threads/thread-a/checkpoints", json={"state": {"s": MARK}}, headers=ha
            )
        )
        a_item = {"namespace": ["ns-a"], "key": "k"}
        _ok(await c.put("/v1/store/items", json={**a_item, "value": {"s": MARK}}, headers=ha))
        _ok(
            await c.post(
                "/v1/remember",
                json={"content": f"{MARK} shared", "shared": True, "chat": chat},
                headers=ha,
            )
        )
        _ok(await c.post("/v1/people", json={"reference": "my sister Zqxsecret"}, headers=ha))
        _ok(
            await c.post(
                "/v1/decisions",
                json={"description": f"Use {MARK} storage", "episode_id": seed["episode"]},
                headers=ha,
            )
        )
        before = _ok(await c.get("/v1/facts", headers=ha))["facts"]
        checkpoint_id = cp.get("checkpoint_id")

        q = {"query": MARK}
        matrix: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", "/v1/me", None),
            ("POST", "/v1/memory/search", q),
            ("POST", "/v1/memory/add", {"type": "fact", "content": "b's own"}),
            ("GET", f"/v1/memory/items/{item}", None),
            ("DELETE", f"/v1/memory/items/{item}", None),
            ("POST", f"/v1/memory/items/{item}/archive", None),
            ("GET", "/v1/memory/themes", None),
            ("POST", "/v1/memory/consolidate", None),
            ("GET", "/v1/memory/consolidation", None),
            ("POST", "/v1/messages/search", q),
            ("POST", "/v1/facts", {"category": "pets", "key": "dog", "value": "b's dog"}),
            ("GET", f"/v1/facts?search={MARK}", None),
            ("POST", "/v1/facts/search", q),
            ("POST", "/v1/facts/forget", {"key": "dog", "category": "pets"}),
            ("GET", "/v1/facts/summary", None),
            ("PUT", "/v1/facts/summary", {"summary": "b's summary"}),
            ("POST", "/v1/jarvus/actions", {"action": "click"}),
            ("POST", "/v1/jarvus/feedback", {"suggestion_id": "s1", "user_response": "ok"}),
            ("POST", "/v1/jarvus/workflows", {"workflow_id": "w1"}),
            ("POST", "/v1/jarvus/store", {"text": "b's", "memory_id": jarvus_id}),
            ("GET", f"/v1/jarvus/episodes?query={MARK}", None),
            ("GET", f"/v1/jarvus/facts?query={MARK}", None),
            ("GET", f"/v1/jarvus/procedures?query={MARK}", None),
            ("GET", "/v1/jarvus/namespaces", None),
            ("DELETE", f"/v1/jarvus/memories/{jarvus_id}", None),
            (
                "POST",
                "/v1/threads/thread-a/checkpoints",
                {"state": {"b": 1}, "parent_id": checkpoint_id},
            ),
            ("GET", "/v1/threads/thread-a/checkpoints", None),
            ("GET", "/v1/threads/thread-a/checkpoints/latest", None),
            ("GET", f"/v1/threads/thread-a/checkpoints/{checkpoint_id}/lineage", None),
            ("DELETE", "/v1/threads/thread-a/checkpoints", None),
            ("PUT", f"/v1/threads/thread-a/checkpoints/{checkpoint_id}", {"state": {"b": 1}}),
            (
                "PUT",
                f"/v1/threads/thread-a/checkpoints/{checkpoint_id}/writes",
                {"task_id": "t", "writes": [{"idx": 0, "channel": "c", "value": 1}]},
            ),
            ("POST", "/v1/threads/thread-a/checkpoints/copy", {"to_thread_id": "thread-b"}),
            ("POST", "/v1/checkpoints/query", {"thread_id": "thread-a", "writes": True}),
            ("POST", "/v1/checkpoints/delete", {"contains_any": [{"s": MARK}]}),
            ("POST", "/v1/checkpoints/prune", {"thread_ids": ["thread-a"], "keep": "none"}),
            ("PUT", "/v1/store/items", {**a_item, "value": {"b": 1}}),
            ("POST", "/v1/store/items/get", a_item),
            ("POST", "/v1/store/search", {"namespace_prefix": ["ns-a"], "query": MARK}),
            ("POST", "/v1/store/namespaces", {}),
            ("POST", "/v1/store/items/delete", a_item),
            # B's turns go to B's own chats (a provider of B's), never joining A's
            ("POST", "/v1/turns", {"chat_id": "chat-of-a", "role": "user", "content": "b"}),
            ("POST", "/v1/turns/list", {"chat_id": "chat-of-a"}),
            ("POST", "/v1/turns/delete", {"chat_id": "chat-of-a"}),
            ("GET", "/v1/tools", None),
            # B's own subscriptions and archive only
            ("GET", "/v1/webhooks", None),
            ("POST", "/v1/webhooks", {"url": "http://169.254.169.254/latest"}),
            ("DELETE", f"/v1/webhooks/{uuid.uuid4()}", None),
            ("GET", f"/v1/webhooks/{uuid.uuid4()}/deliveries", None),
            ("POST", f"/v1/webhooks/{uuid.uuid4()}/replay", None),
            ("GET", "/v1/me/export", None),
            ("POST", "/v1/me/import", {"not": "an archive"}),
            ("DELETE", f"/v1/users/{a}", None),
            ("POST", f"/v1/users/{a}/reenable", None),
            ("POST", "/v1/admin/search", {"query": MARK, "user_id": a}),
            ("GET", "/v1/admin/facts", None),
            ("GET", "/v1/embeddings/settings", None),
            ("GET", "/v1/embeddings/rebuild", None),
            ("POST", "/v1/decisions", {"description": "Use tea", "episode_id": seed["episode"]}),
            ("POST", "/v1/decisions", {"description": "Use tea", **chat}),
            ("POST", "/v1/episodes/search", q),
            ("GET", "/v1/episodes", None),
            ("GET", f"/v1/episodes/{seed['episode']}", None),
            ("POST", "/v1/remember", {"content": "b in a's chat", "shared": True, "chat": chat}),
            ("POST", "/v1/recall", {"query": MARK, "chat": chat}),
            ("GET", "/v1/people", None),
            ("POST", "/v1/people", {"reference": "my brother Bob"}),
            ("POST", "/v1/context", {"message": MARK, "chat": chat}),
            ("POST", "/v1/context", {"message": MARK, "chat": chat, "policy": "sections"}),
            ("POST", "/v1/context", {"message": MARK, "policy": "summary"}),
        ]
        tools = [
            ("memory", {"operation": "search", "query": MARK}),
            ("memory", {"operation": "get", "item_id": str(item)}),
            ("memory", {"operation": "archive", "item_id": str(item)}),
            ("memory", {"operation": "list_themes"}),
            ("memory_facts", {"action": "search", "query": MARK}),
            ("memory_facts", {"action": "list"}),
            ("memory_facts", {"action": "forget", "key": "dog", "category": "pets"}),
            ("recall", {"query": MARK}),
            ("remember", {"content": "b's tool memory"}),
        ]
        mcp_calls = [
            *tools,
            ("memory", {"operation": "add", "type": "fact", "content": "b's mcp memory"}),
            ("memory_facts", {"action": "save", "category": "pets", "key": "dog", "value": "b"}),
            ("memory_facts", {"action": "list"}),
            ("remember", {"content": "b's mcp memory", "shared": True}),
            ("recall", {"query": MARK, "about": "my sister"}),  # A's person
            ("context", {"message": MARK}),
            ("context", {"message": MARK, "policy": "summary"}),
            ("episode_recall", {"query": MARK}),
        ]
        leaks, server_errors, calls = [], [], 0
        for method, path, body in matrix:
            r = await c.request(method, path, json=body, headers=hb)
            calls += 1
            if r.status_code >= 500:
                server_errors.append((method, path, r.status_code))
            if MARK in r.text.lower() or (r.status_code < 300 and _names_a(path, r, a)):
                leaks.append((method, path, r.status_code, r.text[:200]))
        for name, arguments in tools:
            r = await c.post(
                "/v1/tools/call", json={"name": name, "arguments": arguments}, headers=hb
            )
            calls += 1
            if r.status_code >= 500:
                server_errors.append(("tool", name, r.status_code))
            if MARK in r.text.lower():
                leaks.append(("tool", name, r.status_code, r.text[:200]))
        mcp_tools, mcp_leaks = await _over_mcp(base, seed["keys"][b], mcp_calls)
        leaks += mcp_leaks
        calls += len(mcp_calls) + 1
        # what B did changed nothing of A's
        after = _ok(await c.get("/v1/facts", headers=ha))["facts"]
        still = _ok(await c.get(f"/v1/memory/items/{item}", headers=ha))
        lineage = await c.get(
            f"/v1/threads/thread-a/checkpoints/{checkpoint_id}/lineage", headers=ha
        )
        jarvus = await c.get(f"/v1/jarvus/facts?query={MARK}", headers=ha)
        stored_a = await c.post("/v1/store/items/get", json=a_item, headers=ha)
        summary = _ok(await c.get("/v1/facts/summary", headers=ha))
        spec = (await c.get("/openapi.json")).json()
    if [f["value"] for f in after] != [f["value"] for f in before]:
        leaks.append(("write", "A's facts changed", after))
    if still.get("status") != "active":
        leaks.append(("write", "A's memory changed", still.get("status")))
    if lineage.status_code != 200 or MARK not in lineage.text:
        leaks.append(("write", "A's checkpoints changed", lineage.status_code))
    if MARK not in jarvus.text:
        leaks.append(("write", "A's jarvus memory changed", jarvus.text[:200]))
    if stored_a.status_code != 200 or MARK not in stored_a.text:
        leaks.append(("write", "A's store item changed", stored_a.status_code))
    if MARK not in str(summary):
        leaks.append(("write", "A's summary changed", summary))

    covered = {(m, _template(p)) for m, p, _ in matrix} | {("POST", "/v1/tools/call")}
    wanted = {
        (m.upper(), p) for p, ops in spec["paths"].items() if p.startswith("/v1/") for m in ops
    }
    skipped = {
        ("PUT", "/v1/embeddings/settings"),
        ("DELETE", "/v1/embeddings/settings"),
        ("POST", "/v1/embeddings/test"),
        ("POST", "/v1/embeddings/rebuild"),
    }  # B's own only
    missing = wanted - covered - skipped
    missing_tools = set(mcp_tools) - {name for name, _ in mcp_calls}
    print(f"\ncross-user matrix: {calls} calls, leaks {leaks}, 5xx {server_errors}")
    record(
        "cross-user calls",
        calls,
        f"{len(wanted)} operations + {len(tools)} tool calls + {len(mcp_calls)} over MCP",
    )
    record("leaks", len(leaks), "A's data in B's answers, or A's data changed by B")
    assert not missing, f"operations without a row in the matrix: {sorted(missing)}"
    assert not missing_tools, f"MCP tools without a row: {sorted(missing_tools)}"
    assert leaks == []
    assert server_errors == []


async def _over_mcp(
    base: str, key: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Each call over MCP with ``key``: the tools listed, and every answer that holds
    A's words (a tool error is a fine answer; a protocol error is not)."""
    leaks: list[tuple[Any, ...]] = []
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{base}/mcp", http_client=http)
        async with Client(transport) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                text = json.dumps([getattr(b, "text", "") for b in result.content])
                text += json.dumps(result.structured_content or {})
                if MARK in text.lower():
                    leaks.append(("mcp", name, arguments, text[:200]))
    return listed, leaks


def _names_a(path: str, r: httpx.Response, a: str) -> bool:
    return a in r.text


def _template(path: str) -> str:
    """The OpenAPI path of a concrete one (ids back to their parameter names)."""
    path = path.split("?", 1)[0]
    parts = path.split("/")
    names = {
        ("memory", "items"): "{item_id}",
        ("jarvus", "memories"): "{memory_id}",
        ("v1", "threads"): "{thread_id}",
        ("v1", "users"): "{user_id}",
        ("v1", "episodes"): "{episode_id}",
        ("v1", "webhooks"): "{sub_id}",
        ("checkpoints", None): "{checkpoint_id}",
    }
    out = []
    for i, part in enumerate(parts):
        prev = parts[i - 1] if i else ""
        prev2 = parts[i - 2] if i > 1 else ""
        if (prev2, prev) in names and part not in ("search",):
            out.append(names[(prev2, prev)])
        elif prev == "checkpoints" and part not in (
            "latest",
            "",
            "copy",
            "query",
            "delete",
            "prune",
        ):
            out.append("{checkpoint_id}")
        else:
            out.append(part)
    return "/".join(out)
