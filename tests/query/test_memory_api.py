"""Nova's memory surface over HTTP on real PostgreSQL and Redis."""

import asyncio
import json

from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.query.helpers import auth
from tests.support import running


async def _add(client, headers, content, **extra):
    r = await client.post(
        "/v1/memory/add", headers=headers, json={"type": "fact", "content": content, **extra}
    )
    assert r.status_code == 200, r.text
    return r.json()["id"]


async def test_add_defaults_the_theme_to_general_and_asks_for_an_embedding(
    make_settings, pool, redis, user_id
):
    settings = make_settings(QuerySettings)
    app = create_app(settings)
    h = await auth(pool, user_id)
    async with running(app) as client:
        r = await client.post(
            "/v1/memory/add",
            headers=h,
            json={"type": "preference", "content": "Prefers dark mode", "tags": ["ui"]},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["theme"] == "general" and body["embedding"] == "pending"
        r = await client.post(
            "/v1/memory/add",
            headers=h,
            json={"type": "fact", "content": "Works at Acme", "theme": "Work Life"},
        )
        assert r.json()["theme"] == "work-life"
        themes = (await client.get("/v1/memory/themes", headers=h)).json()["themes"]
        assert {t["slug"]: t["active_items"] for t in themes} == {"general": 1, "work-life": 1}
        item = (await client.get(f"/v1/memory/items/{body['id']}", headers=h)).json()
        assert item["content"] == "Prefers dark mode" and item["tags"] == ["ui"]
        assert item["embedding_state"] == "pending" and item["status"] == "active"
    entries = await redis.xrange(settings.stream("embed"))
    targets = [t["id"] for _, f in entries for t in json.loads(f[b"event"])["targets"]]
    assert body["id"] in targets
    changed = await redis.xrange(settings.stream("memories"))
    assert any(json.loads(f[b"event"])["memory_id"] == body["id"] for _, f in changed)


async def test_star_and_empty_query_return_newest_first(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        ids = []
        for i in range(4):
            ids.append(await _add(client, h, f"memory number {i}"))
            await asyncio.sleep(0.01)
        for q in ("*", "", "  "):
            r = await client.post("/v1/memory/search", headers=h, json={"query": q, "limit": 3})
            body = r.json()
            assert body["mode"] == "match_all"
            assert [x["id"] for x in body["results"]] == ids[::-1][:3]
        r = await client.post("/v1/memory/search", headers=h, json={})
        assert len(r.json()["results"]) == 4


async def test_status_filter_hides_archived_unless_asked(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        keep = await _add(client, h, "the wifi password is in the drawer")
        gone = await _add(client, h, "the wifi password is on the fridge")
        r = await client.post(f"/v1/memory/items/{gone}/archive", headers=h)
        assert r.json() == {"id": gone, "status": "archived"}

        async def found(status):
            body = {"query": "wifi password"}
            if status:
                body["status"] = status
            r = await client.post("/v1/memory/search", headers=h, json=body)
            assert r.status_code == 200, r.text
            return {x["id"] for x in r.json()["results"]}

        assert await found(None) == {keep}
        assert await found("active") == {keep}
        assert await found("archived") == {gone}
        assert await found("any") == {keep, gone}
        # archived items stay readable by id (kept for audit), and themes count only active
        assert (await client.get(f"/v1/memory/items/{gone}", headers=h)).json()[
            "status"
        ] == "archived"
        themes = (await client.get("/v1/memory/themes", headers=h)).json()["themes"]
        assert themes[0]["active_items"] == 1


async def test_filters_theme_types_and_recency(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        a = await _add(client, h, "coffee every morning", theme="food")
        b = await client.post(
            "/v1/memory/add",
            headers=h,
            json={"type": "preference", "content": "coffee without sugar", "theme": "food"},
        )
        b = b.json()["id"]
        c = await _add(client, h, "coffee machine at the office", theme="work")
        old = await _add(client, h, "coffee in 2019 was terrible", theme="food")
        await pool.execute(
            "UPDATE memory_items SET created_at = now() - interval '400 days' WHERE id = $1::uuid",
            old,
        )

        async def ids(**kw):
            r = await client.post("/v1/memory/search", headers=h, json={"query": "coffee", **kw})
            assert r.status_code == 200, r.text
            return {x["id"] for x in r.json()["results"]}

        assert await ids() == {a, b, c, old}
        assert await ids(theme="food") == {a, b, old}
        assert await ids(types=["preference"]) == {b}
        assert await ids(recency_days=30) == {a, b, c}
        assert await ids(theme="food", recency_days=30, types=["fact"]) == {a}


async def test_expired_and_superseded_items_are_left_out(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        live = await _add(client, h, "the dentist appointment is on Monday")
        expired = await _add(client, h, "the dentist appointment is on Friday")
        old = await _add(client, h, "the dentist appointment is on Tuesday")
        await pool.execute(
            "UPDATE memory_items SET expires_at = now() - interval '1 minute' WHERE id = $1::uuid",
            expired,
        )
        await pool.execute(
            "UPDATE memory_items SET superseded_at = now(), "
            "superseded_by = $2::uuid WHERE id = $1::uuid",
            old,
            live,
        )
        for q in ("dentist appointment", "*"):
            r = await client.post("/v1/memory/search", headers=h, json={"query": q})
            assert {x["id"] for x in r.json()["results"]} == {live}
            r = await client.post(
                "/v1/memory/search",
                headers=h,
                json={"query": q, "include_superseded": True, "status": "any"},
            )
            assert {x["id"] for x in r.json()["results"]} == {live, old}
        r = await client.get(f"/v1/memory/items/{expired}", headers=h)
        assert r.status_code == 404


async def test_every_write_is_in_the_audit_log(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        a = await _add(client, h, "audited memory")
        await client.post(f"/v1/memory/items/{a}/archive", headers=h)
        r = await client.delete(f"/v1/memory/items/{a}", headers=h)
        assert r.json() == {"id": a, "deleted": True}
        assert (await client.get(f"/v1/memory/items/{a}", headers=h)).status_code == 404
    rows = await pool.fetch(
        "SELECT action FROM audit_log WHERE user_id = $1 AND entity_id = $2 ORDER BY id", user_id, a
    )
    assert [r["action"] for r in rows] == ["create", "archive", "delete"]


async def test_search_results_have_the_specified_shape(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        await _add(client, h, "x" * 50 + " longword " + "y" * 600)
        r = await client.post("/v1/memory/search", headers=h, json={"query": "longword"})
        (hit,) = r.json()["results"]
        assert set(hit) == {
            "id",
            "theme",
            "type",
            "content_snippet",
            "created_at",
            "score",
            "signals",
        }
        assert hit["signals"] == {"fts": True, "semantic": False}
        assert len(hit["content_snippet"]) <= 280 and hit["content_snippet"].endswith("…")
        assert hit["score"] == 1.0
