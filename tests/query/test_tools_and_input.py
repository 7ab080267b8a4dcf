"""Tool schemas and tool calls; bad input gives a 4xx with a message."""

import json

from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.query.helpers import auth
from tests.support import running


async def test_tools_are_listed_in_openai_and_anthropic_formats(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        # a key is needed to list them (issue 29.14)
        assert (await client.get("/v1/tools")).status_code == 401
        body = (await client.get("/v1/tools", headers=h)).json()
        assert [t["function"]["name"] for t in body["openai"]] == [
            "memory",
            "memory_facts",
            "remember",
            "recall",
            "context",
            "episode_recall",
        ]
        assert body["openai"][0]["type"] == "function"
        assert body["openai"][0]["function"]["parameters"]["properties"]["operation"]["enum"] == [
            "search",
            "add",
            "get",
            "archive",
            "list_themes",
        ]
        assert [t["name"] for t in body["anthropic"]] == [
            "memory",
            "memory_facts",
            "remember",
            "recall",
            "context",
            "episode_recall",
        ]
        assert body["anthropic"][1]["input_schema"]["properties"]["action"]["enum"] == [
            "save",
            "search",
            "forget",
            "list",
        ]
        only = (await client.get("/v1/tools", params={"format": "anthropic"}, headers=h)).json()
        assert list(only) == ["anthropic"]


async def test_tool_calls_run_and_errors_are_readable(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)

    async def call(payload):
        r = await client.post("/v1/tools/call", headers=h, json=payload)
        assert r.status_code == 200, r.text
        return r.json()

    async with running(app) as client:
        # OpenAI shape, arguments as a JSON string
        added = await call(
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "memory",
                    "arguments": json.dumps(
                        {"operation": "add", "type": "preference", "content": "Likes green tea"}
                    ),
                },
            }
        )
        assert added["is_error"] is False and added["id"] == "call_1"
        item_id = added["result"]["id"]
        assert json.loads(added["content"])["theme"] == "general"
        # Anthropic shape
        found = await call(
            {
                "type": "tool_use",
                "id": "tu_1",
                "name": "memory",
                "input": {"operation": "search", "query": "tea"},
            }
        )
        assert [r["id"] for r in found["result"]["results"]] == [item_id]
        got = await call({"name": "memory", "arguments": {"operation": "get", "item_id": item_id}})
        assert got["result"]["content"] == "Likes green tea"
        themes = await call({"name": "memory", "arguments": {"operation": "list_themes"}})
        assert themes["result"]["themes"][0]["slug"] == "general"
        archived = await call(
            {"name": "memory", "arguments": {"operation": "archive", "item_id": item_id}}
        )
        assert archived["result"]["status"] == "archived"
        saved = await call(
            {
                "name": "memory_facts",
                "arguments": {
                    "action": "save",
                    "category": "drink",
                    "key": "tea",
                    "value": "green",
                },
            }
        )
        assert saved["result"]["created"] is True
        listed = await call({"name": "memory_facts", "arguments": {"action": "list"}})
        assert listed["result"]["facts"][0]["value"] == "green"
        searched = await call(
            {"name": "memory_facts", "arguments": {"action": "search", "query": "green"}}
        )
        assert searched["result"]["facts"][0]["key"] == "tea"
        forgot = await call(
            {"name": "memory_facts", "arguments": {"action": "forget", "key": "tea"}}
        )
        assert forgot["result"]["deleted"] == 1

        errors = {
            "unknown tool 'nope'": {"name": "nope", "arguments": {}},
            "limit: Input should be less than or equal to 50": {
                "name": "memory",
                "arguments": {"operation": "search", "limit": 500},
            },
            "types.0: Input should be": {
                "name": "memory",
                "arguments": {"operation": "search", "types": ["bogus"]},
            },
            "not valid JSON": {"name": "memory", "arguments": "{operation: search"},
            "unknown operation 'drop'": {"name": "memory", "arguments": {"operation": "drop"}},
            "content: Field required": {
                "name": "memory",
                "arguments": {"operation": "add", "type": "fact"},
            },
            "no memory": {
                "name": "memory",
                "arguments": {
                    "operation": "get",
                    "item_id": "00000000-0000-0000-0000-000000000000",
                },
            },
            "not a memory id": {
                "name": "memory",
                "arguments": {"operation": "get", "item_id": "42"},
            },
            "no fact with key 'tea'": {
                "name": "memory_facts",
                "arguments": {"action": "forget", "key": "tea"},
            },
        }
        for expected, payload in errors.items():
            out = await call(payload)
            assert out["is_error"] is True and expected in out["error"], (expected, out)
            assert out["content"].startswith("error: ")


async def test_bad_input_gets_a_4xx_with_a_message(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        cases = [
            ("post", "/v1/memory/search", {"json": {"query": "x", "limit": 500}}, 422, "limit"),
            ("post", "/v1/memory/search", {"json": {"query": "x", "limit": 0}}, 422, "limit"),
            ("post", "/v1/memory/search", {"json": {"status": "deleted"}}, 422, "status"),
            ("post", "/v1/memory/search", {"json": {"types": ["bogus"]}}, 422, "types"),
            ("post", "/v1/memory/add", {"json": {"type": "bogus", "content": "x"}}, 422, "type"),
            ("post", "/v1/memory/add", {"json": {"type": "fact"}}, 422, "content"),
            (
                "post",
                "/v1/memory/add",
                {"json": {"type": "fact", "content": "   "}},
                400,
                "content",
            ),
            (
                "post",
                "/v1/memory/add",
                {"content": b"{not json", "headers": {"content-type": "application/json"}},
                422,
                "JSON",
            ),
            ("get", "/v1/memory/items/not-a-uuid", {}, 422, "UUID"),
            ("post", "/v1/facts", {"json": {"category": "a", "key": "b"}}, 422, "value"),
            (
                "post",
                "/v1/facts",
                {"json": {"category": "a", "key": "b", "value": "c", "confidence": 1.5}},
                422,
                "confidence",
            ),
            ("get", "/v1/facts", {"params": {"sort_by": "password"}}, 422, "sort_by"),
            ("get", "/v1/jarvus/facts", {"params": {"limit": 500}}, 422, "limit"),
            ("post", "/v1/jarvus/store", {"json": {"text": "x", "type": "nope"}}, 422, "type"),
            ("post", "/v1/tools/call", {"json": {"arguments": {}}}, 422, "name"),
        ]
        for method, path, kwargs, status, word in cases:
            headers = {**h, **kwargs.pop("headers", {})}
            r = await getattr(client, method)(path, headers=headers, **kwargs)
            assert r.status_code == status, (path, kwargs, r.status_code, r.text)
            assert word.lower() in r.json()["detail"].lower(), (path, r.json())
        r = await client.post("/v1/memory/search", json={"query": "x"})
        assert r.status_code == 401 and "missing API key" in r.json()["detail"]
