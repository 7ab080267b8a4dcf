"""One rule for every search text (issue 29.18, ``services/query/embeddings/query.py``):
empty, blank or ``*`` lists the newest rows (nothing embedded), a text over the limit
is a 422 naming the field without echoing it; over HTTP, the HTTP tool call and MCP.

Real query service over real PostgreSQL and Redis; the query embedder is a fixed one
that records what it was asked to embed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import pytest

from services.query.app import TOOLBOX, create_app
from services.query.embeddings.query import MAX_SEARCH_CHARS
from services.query.settings import QuerySettings
from shared.memory.writer import NewItem, insert_items
from tests.embedder.conftest import add_messages
from tests.live import LiveQuery, live_query
from tests.mcp.test_mcp import http_client, key_for
from tests.query.helpers import FixedEmbedder, admin_auth, auth, resolver_for
from tests.support import running

__all__ = ["live_query"]

BLANK = ["", "   ", "\t\n", "*", " * "]
HUGE = "y" * (MAX_SEARCH_CHARS + 1)
HUGE_MESSAGE = "y" * 20_001  # a context's message is a chat message: 20,000 characters
MARK = "kumquat"  # in every seeded row: a listing shows it


class Recording(FixedEmbedder):
    def __init__(self) -> None:
        super().__init__({})
        self.asked: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.asked.extend(texts)
        return await super().embed(texts)


def _post(path: str, field: str = "query", **extra: Any) -> Callable[[str], tuple]:
    return lambda q: ("POST", path, {field: q, **extra})


def _get(path: str, param: str) -> Callable[[str], tuple]:
    return lambda q: ("GET", path, {param: q})


def _tool(name: str, field: str = "query", **extra: Any) -> Callable[[str], tuple]:
    return lambda q: ("POST", "/v1/tools/call", {"name": name, "arguments": {field: q, **extra}})


# Every surface that takes a search text: (id, the request for a text)
SURFACES: list[tuple[str, Callable[[str], tuple]]] = [
    ("memory.search", _post("/v1/memory/search")),
    ("facts.search", _post("/v1/facts/search")),
    ("messages.search", _post("/v1/messages/search")),
    ("episodes.search", _post("/v1/episodes/search")),
    ("recall", _post("/v1/recall")),
    ("store.search", _post("/v1/store/search", namespace_prefix=["notes"])),
    ("jarvus.facts", _get("/v1/jarvus/facts", "query")),
    ("jarvus.episodes", _get("/v1/jarvus/episodes", "query")),
    ("jarvus.procedures", _get("/v1/jarvus/procedures", "query")),
    ("facts.list search", _get("/v1/facts", "search")),
    ("admin.search", _post("/v1/admin/search", user_id="<user>")),
    ("tool memory.search", _tool("memory", operation="search")),
    ("tool memory_facts.search", _tool("memory_facts", action="search")),
    ("tool recall", _tool("recall")),
    ("tool episode_recall", _tool("episode_recall")),
    # the context's message: a blank one matches nothing; the newest memories
    ("context", _post("/v1/context", field="message")),
    ("tool context", _tool("context", field="message")),
]
# every search field of the tool schemas is in the list above
SEARCH_TOOLS = {
    ("memory", "query"),
    ("memory_facts", "query"),
    ("recall", "query"),
    ("episode_recall", "query"),
    ("context", "message"),
}


async def _seed(client: Any, pool: asyncpg.Pool, user_id: str, h: dict[str, str]) -> None:
    for r in (
        await client.post(
            "/v1/memory/add", json={"type": "fact", "content": f"{MARK} jam"}, headers=h
        ),
        await client.post(
            "/v1/facts", json={"category": "food", "key": "jam", "value": MARK}, headers=h
        ),
        await client.put(
            "/v1/store/items",
            json={"namespace": ["notes"], "key": "jam", "value": {"text": MARK}},
            headers=h,
        ),
    ):
        assert r.status_code in (200, 201), r.text
    async with pool.acquire() as conn:
        await insert_items(
            conn,
            user_id,
            [
                NewItem(type="episode", content=f"{MARK} picked"),
                NewItem(type="procedure", content=f"{MARK} jam recipe"),
            ],
            actor="test",
        )
    await add_messages(pool, user_id, [f"{MARK} jam on toast"])
    await pool.execute(
        "UPDATE episodes SET summary_text = $2, summary = jsonb_build_object('title', $2::text) "
        "WHERE user_id = $1",
        user_id,
        MARK,
    )


async def _call(client: Any, request: tuple, user_id: str, h: dict[str, str]) -> Any:
    method, path, body = request
    if "user_id" in body:
        body = {**body, "user_id": user_id}
    if method == "GET":
        return await client.get(path, params=body, headers=h)
    return await client.post(path, json=body, headers=h)


@pytest.mark.parametrize(("name", "request_for"), SURFACES, ids=[s[0] for s in SURFACES])
async def test_a_blank_search_lists_the_newest_and_a_huge_one_is_a_422_naming_the_field(
    make_settings: Callable[..., Any],
    pool: asyncpg.Pool,
    user_id: str,
    name: str,
    request_for: Callable[[str], tuple],
) -> None:
    embedder = Recording()
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(embedder))
    h = await auth(pool, user_id)
    admin = await admin_auth(pool)
    async with running(app) as client:
        await _seed(client, pool, user_id, h)
        for text in BLANK:
            who = admin if name.startswith("admin") else h
            r = await _call(client, request_for(text), user_id, who)
            assert r.status_code == 200, (name, text, r.text)
            assert "is_error" not in r.json() or r.json()["is_error"] is False, r.text
            assert MARK in r.text, (name, text, r.text[:500])  # the newest, listed
        # blank and '*' are never embedded (nothing to match)
        assert [t for t in embedder.asked if t.strip() in ("", "*")] == []
        field = request_for("")[2].get("arguments", request_for("")[2])
        named = "message" if "message" in field else ("search" if "search" in field else "query")
        huge = HUGE_MESSAGE if named == "message" else HUGE
        r = await _call(client, request_for(huge), user_id, admin if "admin" in name else h)
        assert huge[:50] not in r.text and len(r.text) < 2_000, (name, r.text[:300])
        if r.status_code == 200:  # a tool call: a tool error the model can read
            assert r.json()["is_error"] is True, r.text
            assert named in r.json()["content"], r.text
        else:
            assert r.status_code == 422, (name, r.status_code, r.text)
            assert r.json()["errors"][0]["field"] == named, r.text


def test_every_search_field_of_the_tools_is_covered() -> None:
    found = set()
    for tool in TOOLBOX.schemas("openai")["openai"]:
        fn = tool["function"]
        for field in fn["parameters"]["properties"]:
            if field in ("query", "message"):
                found.add((fn["name"], field))
    assert found == SEARCH_TOOLS


async def test_a_blank_search_over_mcp_lists_the_newest(
    live_query: LiveQuery, pool: asyncpg.Pool
) -> None:
    user = f"mcp-blank-{uuid.uuid4().hex[:8]}"
    await pool.execute("INSERT INTO users (id) VALUES ($1)", user)
    async with pool.acquire() as conn:
        await insert_items(conn, user, [NewItem(type="fact", content=f"{MARK} jam")], actor="test")
    key = await key_for(pool, user)
    async with http_client(live_query, key) as client:
        for text in ("", "  ", "*"):
            found = await client.call_tool("memory", {"operation": "search", "query": text})
            assert not found.is_error, found.content
            assert MARK in found.content[0].text
            hits = json.loads(found.content[0].text)
            assert hits["mode"] == "match_all"
        huge = await client.call_tool("memory", {"operation": "search", "query": HUGE})
        assert huge.is_error and "query" in huge.content[0].text
        assert HUGE[:50] not in huge.content[0].text


async def test_the_browsers_search_box_follows_the_same_rule(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """The browser answers bad input with its 400 page (not the API's 422), naming the
    search text and its limit, never echoing it."""
    embedder = Recording()
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(embedder))
    h = await auth(pool, user_id)
    async with running(app) as client:
        await _seed(client, pool, user_id, h)
        r = await client.post("/ui/login", data={"key": h["Authorization"].split()[1]})
        assert r.status_code == 303, r.text
        for text in BLANK:
            r = await client.get("/ui/memories", params={"q": text})
            assert r.status_code == 200 and f"{MARK} jam" in r.text, (text, r.text[:300])
        r = await client.get("/ui/memories", params={"q": HUGE})
    assert r.status_code == 400 and f"longer than {MAX_SEARCH_CHARS} characters" in r.text
    assert HUGE[:50] not in r.text
    assert [t for t in embedder.asked if t.strip() in ("", "*")] == []
