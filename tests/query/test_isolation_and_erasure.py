"""User A's data is invisible to user B everywhere; erasure leaves no row behind."""

import uuid

import pytest

from services.query.app import create_app
from services.query.rpc.search import search_channel
from services.query.settings import QuerySettings
from shared.embeddings import vector_index
from tests.query.helpers import FixedEmbedder, admin_auth, auth, resolver_for, set_vector, unit
from tests.support import running

SECRET = "platypus"


async def _store_everything(client, h):
    """Write through every endpoint that stores something; return the ids made."""
    ids = {}
    r = await client.post(
        "/v1/memory/add",
        headers=h,
        json={"type": "fact", "content": f"the {SECRET} lives in Tasmania", "theme": "zoo"},
    )
    ids["memory"] = r.json()["id"]
    r = await client.post(
        "/v1/facts",
        headers=h,
        json={"category": "animals", "key": SECRET, "value": f"{SECRET} facts"},
    )
    ids["fact"] = r.json()["id"]
    await client.put("/v1/facts/summary", headers=h, json={"summary": f"{SECRET} lover"})
    r = await client.post(
        "/v1/jarvus/actions", headers=h, json={"action": "click", "target": SECRET}
    )
    ids["action"] = r.json()["memory_id"]
    await client.post(
        "/v1/jarvus/feedback",
        headers=h,
        json={"suggestion_id": "s1", "user_response": "accepted", "notes": SECRET},
    )
    r = await client.post(
        "/v1/jarvus/workflows",
        headers=h,
        json={"workflow_id": SECRET, "store_as_procedure": True, "description": SECRET},
    )
    ids["procedure"] = r.json()["procedure_id"]
    r = await client.post(
        "/v1/jarvus/store", headers=h, json={"text": f"{SECRET} pref", "type": "preference"}
    )
    ids["store"] = r.json()["memory_id"]
    await client.post(
        f"/v1/threads/{SECRET}/checkpoints",
        headers=h,
        json={"state": {"s": SECRET}, "checkpoint_id": "c1"},
    )
    return ids


async def test_user_b_never_sees_user_a_data(make_settings, pool):
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    q = unit(77)
    app = create_app(
        make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({SECRET: q}))
    )
    ha, hb = await auth(pool, a), await auth(pool, b)
    async with running(app) as client:
        ids = await _store_everything(client, ha)
        for i in ids.values():
            await set_vector(pool, i, q)  # A's vectors are exactly B's query vector
        # sanity: A finds its own data
        r = await client.post("/v1/memory/search", headers=ha, json={"query": SECRET})
        assert len(r.json()["results"]) >= 5
        # B, through every read
        for query in (SECRET, "*", ""):
            for status in ("active", "any"):
                r = await client.post(
                    "/v1/memory/search",
                    headers=hb,
                    json={"query": query, "status": status, "include_superseded": True},
                )
                assert r.json()["results"] == [], r.json()
        for i in ids.values():
            assert (await client.get(f"/v1/memory/items/{i}", headers=hb)).status_code == 404
            r = await client.post(f"/v1/memory/items/{i}/archive", headers=hb)
            assert r.status_code == 404
            assert (await client.delete(f"/v1/memory/items/{i}", headers=hb)).status_code == 404
            r = await client.delete(f"/v1/jarvus/memories/{i}", headers=hb)
            assert r.status_code == 404
            r = await client.post(
                "/v1/jarvus/store", headers=hb, json={"text": "overwrite", "memory_id": i}
            )
            assert r.status_code == 404
        assert (await client.get("/v1/memory/themes", headers=hb)).json()["themes"] == []
        assert (await client.get("/v1/facts", headers=hb)).json()["facts"] == []
        r = await client.post("/v1/facts/search", headers=hb, json={"query": SECRET})
        assert r.json()["facts"] == []
        r = await client.post("/v1/facts/forget", headers=hb, json={"key": SECRET})
        assert r.status_code == 404
        assert (await client.get("/v1/facts/summary", headers=hb)).json()["summary"] is None
        for kind in ("episodes", "facts", "procedures"):
            for params in ({}, {"query": SECRET}):
                r = await client.get(f"/v1/jarvus/{kind}", headers=hb, params=params)
                assert r.json()[kind] == [], (kind, params)
        assert (await client.get("/v1/jarvus/namespaces", headers=hb)).json()["namespaces"] == []
        base = f"/v1/threads/{SECRET}/checkpoints"
        assert (await client.get(f"{base}/latest", headers=hb)).status_code == 404
        assert (await client.get(f"{base}/c1/lineage", headers=hb)).status_code == 404
        assert (await client.get(base, headers=hb)).json()["checkpoints"] == []
        assert (await client.delete(base, headers=hb)).status_code == 404
        # B cannot act as A, nor erase A
        r = await client.post(
            "/v1/memory/search", headers={**hb, "X-Engram-User": a}, json={"query": SECRET}
        )
        assert r.status_code == 403
        assert (await client.delete(f"/v1/users/{a}", headers=hb)).status_code == 403
        assert (await client.get("/v1/admin/facts", headers=hb)).status_code == 403
        # tool calls as B
        for args in (
            {"operation": "search", "query": SECRET},
            {"operation": "search", "query": "*"},
            {"operation": "list_themes"},
        ):
            r = (
                await client.post(
                    "/v1/tools/call", headers=hb, json={"name": "memory", "arguments": args}
                )
            ).json()
            assert not r["is_error"] and SECRET not in r["content"], r
        for i in ids.values():
            for op in ("get", "archive"):
                r = (
                    await client.post(
                        "/v1/tools/call",
                        headers=hb,
                        json={"name": "memory", "arguments": {"operation": op, "item_id": i}},
                    )
                ).json()
                assert r["is_error"] and "no memory" in r["error"]
        for args in ({"action": "search", "query": SECRET}, {"action": "list"}):
            r = (
                await client.post(
                    "/v1/tools/call", headers=hb, json={"name": "memory_facts", "arguments": args}
                )
            ).json()
            assert SECRET not in r["content"], r
        r = (
            await client.post(
                "/v1/tools/call",
                headers=hb,
                json={"name": "memory_facts", "arguments": {"action": "forget", "key": SECRET}},
            )
        ).json()
        assert r["is_error"]
        # the request/reply handler
        rt = app.state.runtime
        channel = search_channel(rt.settings)
        reply = await (
            await rt.broker.request({"user_id": b, "query": SECRET}, channel=channel, timeout=10)
        ).decode()
        assert reply == {"mode": "hybrid", "results": []}
        reply = await (
            await rt.broker.request({"user_id": a, "query": SECRET}, channel=channel, timeout=10)
        ).decode()
        assert len(reply["results"]) >= 5 and reply["mode"] == "hybrid"
        reply = await (
            await rt.broker.request({"query": SECRET, "limit": 500}, channel=channel, timeout=10)
        ).decode()
        assert "user_id" in reply["error"] and "limit" in reply["error"]
        # an admin sees A only when asking for A (or across users)
        hadm = await admin_auth(pool)
        r = await client.post("/v1/admin/search", headers=hadm, json={"query": SECRET})
        assert {x["user_id"] for x in r.json()["results"]} == {a}
        r = await client.post(
            "/v1/admin/search", headers=hadm, json={"query": SECRET, "user_id": b}
        )
        assert r.json()["results"] == []
        r = await client.post("/v1/admin/search", headers=ha, json={"query": SECRET})
        assert r.status_code == 403


@pytest.mark.parametrize("as_admin", [False, True])
async def test_erasing_a_user_leaves_no_row_of_theirs(make_settings, pool, as_admin):
    a, other = f"erase-{uuid.uuid4().hex[:8]}", f"keep-{uuid.uuid4().hex[:8]}"
    app = create_app(make_settings(QuerySettings))
    ha, ho = await auth(pool, a), await auth(pool, other)
    async with running(app) as client:
        await _store_everything(client, ha)
        await _store_everything(client, ho)
        episode = uuid.uuid4()
        await pool.execute(
            "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
            "VALUES ($1, $2, 'tg', 'c', now(), now())",
            episode,
            a,
        )
        await pool.execute(
            "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
            "content, occurred_at) VALUES ($1, $2, $3, 'tg', 'c', 'user', 'hi', now())",
            uuid.uuid4(),
            a,
            episode,
        )
        await pool.execute("INSERT INTO people (user_id, name) VALUES ($1, 'Ann')", a)
        await pool.execute(
            "INSERT INTO embedding_settings (user_id, provider, model) "
            "VALUES ($1, 'local', 'all-MiniLM-L6-v2')",
            a,
        )
        # a big user's derived rows too: postings, shapes, common words counted (the
        # erasure deletes these before the turns)
        await vector_index.index_user(pool, a, "message", settle_s=0)
        await vector_index.count_words(pool, a, settle_s=0, counted_from=1)
        for derived in ("message_postings", "message_shapes", "message_word_counts"):
            assert await pool.fetchval(f"SELECT count(*) FROM {derived} WHERE user_id = $1", a), (
                derived
            )
        headers = await admin_auth(pool) if as_admin else ha
        r = await client.delete(f"/v1/users/{a}", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["rows"]["memory_items"] >= 6
        # the erased user's key no longer works
        assert (await client.get("/v1/me", headers=ha)).status_code == 401
        assert (
            await client.delete(f"/v1/users/{a}", headers=await admin_auth(pool))
        ).status_code == 404
    tables = await pool.fetch(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'user_id' "
        "AND table_schema = current_schema()"
    )
    assert {"audit_log", "api_keys", "memory_items", "checkpoints"} <= {
        t["table_name"] for t in tables
    }
    for t in tables:
        n = await pool.fetchval(f'SELECT count(*) FROM "{t["table_name"]}" WHERE user_id = $1', a)
        assert n == 0, t["table_name"]
    assert await pool.fetchval("SELECT count(*) FROM users WHERE id = $1", a) == 0
    # the other user is untouched
    assert await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", other) >= 6
    assert await pool.fetchval("SELECT count(*) FROM audit_log WHERE user_id = $1", other) > 0
    # nothing in the log names the erased user
    assert (
        await pool.fetchval("SELECT count(*) FROM audit_log WHERE details::text LIKE $1", f"%{a}%")
        == 0
    )
