"""engram_langgraph.EngramStore against a running query service, mirroring LangGraph's
own store tests (langgraph's test_store.py / test_async_store.py for the Postgres store):
batch order, get/put/delete, hierarchical search with filters and pagination, query
ranking, namespace listing; then what only engram adds: the items are engram memories,
and one user's store is invisible to another. The live service here searches full-text
(no embedder), so a query ranks by the lexical half of the hybrid search."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from langgraph.store.base import GetOp, Item, ListNamespacesOp, PutOp, SearchOp

from engram_client import AsyncEngram, ValidationFailed
from engram_client import _calls as c
from engram_langgraph import EngramStore
from shared.apikeys import create_key
from tests.live import LiveQuery


async def new_store(live: LiveQuery, pool: asyncpg.Pool) -> EngramStore:
    _, key = await create_key(pool, user_id=f"store-{uuid.uuid4().hex[:8]}")
    return EngramStore(live.url, key)


async def test_abatch_keeps_the_order_of_mixed_operations(
    live_query: LiveQuery, pool: asyncpg.Pool
) -> None:
    store = await new_store(live_query, pool)
    await store.aput(("test", "foo"), "key1", {"data": "value1"})
    await store.aput(("test", "bar"), "key2", {"data": "value2"})
    results = await store.abatch(
        [
            GetOp(namespace=("test", "foo"), key="key1"),
            PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
            SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(namespace=("test",), key="key3"),
        ]
    )
    assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
    assert results[0].key == "key1" and results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert isinstance(results[2], list)
    assert [i.key for i in results[2] if isinstance(i, Item)] == ["key1"]
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None


async def test_put_get_update_delete(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    store = await new_store(live_query, pool)
    ns = ("users", "u1", "prefs")
    await store.aput(ns, "food", {"likes": "pizza", "n": 1})
    first = await store.aget(ns, "food")
    assert first is not None and first.value == {"likes": "pizza", "n": 1}
    await asyncio.sleep(0.01)
    await store.aput(ns, "food", {"likes": "sushi", "n": 2})
    second = await store.aget(ns, "food")
    assert second is not None and second.value == {"likes": "sushi", "n": 2}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert await store.aget(("users", "u1"), "food") is None  # not the parent namespace
    await store.adelete(ns, "food")
    assert await store.aget(ns, "food") is None
    await store.adelete(ns, "food")  # deleting nothing is fine
    # the batch form: a None value deletes
    await store.abatch([PutOp(ns, "k", {"v": 1}), PutOp(ns, "k", None), PutOp(ns, "j", {"v": 2})])
    assert [i.key for i in await store.asearch(ns)] == ["j"]


async def test_search_by_prefix_filter_and_page(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    store = await new_store(live_query, pool)
    docs = [
        (("docs", "a"), "d1", {"text": "red apple", "color": "red", "score": 4.5}),
        (("docs", "a"), "d2", {"text": "red car", "color": "red", "score": 3.0}),
        (("docs", "b"), "d3", {"text": "green apple", "color": "green", "score": 4.0}),
        (("docs", "b", "deep"), "d4", {"text": "blue car", "color": "blue", "score": 3.5}),
        (("docsx",), "d5", {"text": "red apple", "color": "red", "score": 5.0}),
    ]
    for ns, key, value in docs:
        await store.aput(ns, key, value)

    def keys(items: Sequence[Item]) -> set[str]:
        return {i.key for i in items}

    assert keys(await store.asearch(("docs",), limit=10)) == {"d1", "d2", "d3", "d4"}
    assert keys(await store.asearch(("docs", "b"), limit=10)) == {"d3", "d4"}
    assert keys(await store.asearch((), limit=10)) == {"d1", "d2", "d3", "d4", "d5"}
    assert keys(await store.asearch(("docs",), filter={"color": "red"})) == {"d1", "d2"}
    assert keys(await store.asearch(("docs",), filter={"score": {"$gt": 3.2}})) == {
        "d1",
        "d3",
        "d4",
    }
    found = await store.asearch(("docs",), filter={"score": {"$gte": 4.0}, "color": "green"})
    assert keys(found) == {"d3"}
    assert keys(await store.asearch(("docs",), filter={"color": {"$ne": "red"}})) == {"d3", "d4"}
    # newest first without a query; pages do not overlap
    newest = await store.asearch(("docs",), limit=10)
    assert [i.key for i in newest] == ["d4", "d3", "d2", "d1"]
    assert all(i.score is None for i in newest)
    page1 = await store.asearch(("docs",), limit=2)
    page2 = await store.asearch(("docs",), limit=2, offset=2)
    assert [i.key for i in page1 + page2] == ["d4", "d3", "d2", "d1"]


async def test_query_ranks_matches_first(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    store = await new_store(live_query, pool)
    await store.aput(("test",), "doc1", {"text": "zany zebra Xerxes"})
    await store.aput(("test",), "doc2", {"text": "something about dogs"})
    await store.aput(("test",), "doc3", {"text": "text about birds"}, index=["text"])
    found = await store.asearch(("test",), query="zebra")
    assert found[0].key == "doc1" and found[0].score is not None and found[0].score > 0
    assert [i.score for i in found[1:]] == [None, None]  # the rest, newest first
    assert (await store.asearch(("test",), query="birds", limit=1))[0].key == "doc3"
    await store.aput(("test",), "doc1", {"text": "now about cats"})
    assert (await store.asearch(("test",), query="zebra"))[0].score is None
    assert (await store.asearch(("test",), query="dogs", filter={"text": "text about birds"}))[
        0
    ].key == "doc3"


async def test_list_namespaces(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    store = await new_store(live_query, pool)
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x"), ("q", "b", "d")]:
        await store.aput(ns, "k", {"v": 1})
    assert await store.alist_namespaces() == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "x"),
        ("q", "b", "d"),
    ]
    assert await store.alist_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert await store.alist_namespaces(suffix=("d",)) == [("a", "b", "d"), ("q", "b", "d")]
    assert await store.alist_namespaces(prefix=("*", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("q", "b", "d"),
    ]
    assert await store.alist_namespaces(max_depth=2) == [("a", "b"), ("a", "x"), ("q", "b")]
    assert await store.alist_namespaces(limit=1, offset=1) == [("a", "b", "d")]


@pytest.fixture
async def url_key(live_query: LiveQuery, pool: asyncpg.Pool) -> tuple[str, str]:
    _, key = await create_key(pool, user_id=f"store-{uuid.uuid4().hex[:8]}")
    return live_query.url, key


def test_sync_methods(url_key: tuple[str, str]) -> None:
    store = EngramStore(*url_key)
    store.put(("s", "t"), "k", {"text": "hello from the sync path"})
    item = store.get(("s", "t"), "k")
    assert item is not None and item.value == {"text": "hello from the sync path"}
    assert [i.key for i in store.search(("s",), query="hello")] == ["k"]
    assert store.list_namespaces(prefix=("s",)) == [("s", "t")]
    assert store.batch([GetOp(("s", "t"), "k"), PutOp(("s", "t"), "k", None)])[1] is None
    assert store.get(("s", "t"), "k") is None
    store.close()


@pytest.fixture
async def two_stores(live_query: LiveQuery, pool: asyncpg.Pool) -> tuple[EngramStore, EngramStore]:
    return await new_store(live_query, pool), await new_store(live_query, pool)


async def test_a_users_store_is_invisible_to_another(
    two_stores: tuple[EngramStore, EngramStore],
) -> None:
    a, b = two_stores
    await a.aput(("shared", "ns"), "secret", {"text": "a's secret plan"})
    assert await b.aget(("shared", "ns"), "secret") is None
    assert await b.asearch(("shared",), query="secret plan") == []
    assert await b.alist_namespaces() == []
    await b.adelete(("shared", "ns"), "secret")
    assert await a.aget(("shared", "ns"), "secret") is not None


async def test_items_are_engram_memories(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    store = await new_store(live_query, pool)
    await store.aput(("profile",), "diet", {"text": "vegetarian since 2019"}, index=["text"])
    found = await store.aclient.memory.search("vegetarian")
    assert [h.content_snippet for h in found.results] == ["vegetarian since 2019"]
    assert found.results[0].type == "other"


async def test_bad_input_is_4xx_naming_the_field(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    _, key = await create_key(pool, user_id=f"store-{uuid.uuid4().hex[:8]}")
    async with AsyncEngram(live_query.url, key) as client:
        calls: list[tuple[c.Call[Any], str]] = [
            (c.store_put(["a.b"], "k", {"v": 1}), "namespace"),
            (c.store_put([], "k", {"v": 1}), "namespace"),
            (c.store_search(["a"], filter={"v": {"$regex": "x"}}), "filter.v"),
            (c.store_search(["a"], limit=0), "limit"),
        ]
        for call, field in calls:
            with pytest.raises(Exception) as caught:
                await client.send(call)
            assert caught.value.status in (400, 422), caught.value  # type: ignore[attr-defined]
            assert field in str(caught.value), caught.value
        with pytest.raises(ValidationFailed):
            await client.send(c.store_namespaces(max_depth=0))
