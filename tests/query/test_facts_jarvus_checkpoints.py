"""Navi's facts, Jarvus's stores and typed retrieval, thread checkpoints."""

import pytest

from services.extractor.facts import Fact, FactPlan, apply_plan
from services.extractor.narrative import regenerate_user_summary
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.llm.offline import OfflineExtractor
from shared.llm.schemas import FactCandidate
from tests.query.helpers import FixedEmbedder, auth, resolver_for, set_vector, unit
from tests.support import running


async def test_saving_a_fact_twice_updates_one_row(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        fact = {
            "category": "location",
            "key": "home_city",
            "value": "Lyon",
            "source": "user_explicit",
        }
        first = (await client.post("/v1/facts", headers=h, json=fact)).json()
        assert first["created"] is True and first["confidence"] == 0.9
        second = (
            await client.post(
                "/v1/facts", headers=h, json={**fact, "value": "Paris", "confidence": 0.8}
            )
        ).json()
        assert second["created"] is False and second["id"] == first["id"]
        listed = (await client.get("/v1/facts", headers=h)).json()
        assert listed["total"] == 1 and listed["facts"][0]["value"] == "Paris"
        assert listed["facts"][0]["confidence"] == pytest.approx(0.8)  # 0-1 (migration 0110)
    actions = await pool.fetch(
        "SELECT action FROM audit_log WHERE user_id = $1 AND entity = 'memory' ORDER BY id", user_id
    )
    assert [a["action"] for a in actions] == ["create", "update"]


async def test_fact_search_is_vector_first_then_trigram(make_settings, pool, user_id):
    q = unit(50)
    app = create_app(
        make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({"where do I live": q}))
    )
    h = await auth(pool, user_id)
    async with running(app) as client:
        city = (
            await client.post(
                "/v1/facts",
                headers=h,
                json={"category": "location", "key": "home_city", "value": "Lyon"},
            )
        ).json()["id"]
        far = (
            await client.post(
                "/v1/facts",
                headers=h,
                json={"category": "food", "key": "favourite", "value": "ramen"},
            )
        ).json()["id"]
        await client.post(
            "/v1/facts",
            headers=h,
            json={"category": "pets", "key": "dog", "value": "a beagle called Rex"},
        )
        await set_vector(pool, city, unit(51, near=q, noise=0.2))  # distance < 0.3
        await set_vector(pool, far, unit(52))  # far away: cut off
        found = (
            await client.post("/v1/facts/search", headers=h, json={"query": "where do I live"})
        ).json()["facts"]
        assert [f["id"] for f in found] == [city] and found[0]["match"] == "semantic"
        found = (await client.post("/v1/facts/search", headers=h, json={"query": "beagel"})).json()[
            "facts"
        ]
        assert [f["key"] for f in found] == ["dog"] and found[0]["match"] == "trigram"


async def test_facts_forget_list_expiry_and_summary(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        for cat, key, val in [
            ("work", "employer", "Acme"),
            ("work", "role", "engineer"),
            ("home", "role", "parent"),
            ("tmp", "mood", "tired"),
        ]:
            r = await client.post(
                "/v1/facts",
                headers=h,
                json={"category": cat, "key": key, "value": val, "expires_days": 3},
            )
            assert r.status_code == 200, r.text
        await pool.execute(
            "UPDATE memory_items SET expires_at = now() - interval '1 hour' "
            "WHERE user_id = $1 AND key = 'mood'",
            user_id,
        )
        page = (
            await client.get(
                "/v1/facts",
                headers=h,
                params={"sort_by": "key", "sort_order": "asc", "limit": 2, "offset": 0},
            )
        ).json()
        assert page["total"] == 3 and [f["key"] for f in page["facts"]] == ["employer", "role"]
        r = await client.post(
            "/v1/facts/forget", headers=h, json={"key": "role", "category": "home"}
        )
        assert r.json()["deleted"] == 1
        r = await client.post("/v1/facts/forget", headers=h, json={"key": "nope"})
        assert r.status_code == 404 and "nope" in r.json()["detail"]
        keys = [f["key"] for f in (await client.get("/v1/facts", headers=h)).json()["facts"]]
        assert sorted(keys) == ["employer", "role"]
        assert (await client.get("/v1/facts/summary", headers=h)).json()["summary"] is None
        r = await client.put("/v1/facts/summary", headers=h, json={"summary": "Works at Acme."})
        assert r.json()["fact_count"] == 2
        assert (await client.get("/v1/facts/summary", headers=h)).json()[
            "summary"
        ] == "Works at Acme."


async def test_jarvus_stores_and_typed_retrieval(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        r = await client.post(
            "/v1/jarvus/actions",
            headers=h,
            json={
                "action": "click",
                "target": "button#submit",
                "url": "https://example.com",
                "result": "success",
                "timestamp": "2024-06-01T12:00:00Z",
                "details": {"extra": "Clicked submit on login form"},
            },
        )
        action_id = r.json()["memory_id"]
        item = (await client.get(f"/v1/memory/items/{action_id}", headers=h)).json()
        assert item["type"] == "episode" and item["data"]["type"] == "chrome_action"
        assert "click button#submit on https://example.com" in item["content"]
        await client.post(
            "/v1/jarvus/feedback",
            headers=h,
            json={"suggestion_id": "12345", "user_response": "accepted", "notes": "worked well"},
        )
        r = await client.post(
            "/v1/jarvus/workflows",
            headers=h,
            json={
                "workflow_id": "wf_001",
                "result": "success",
                "store_as_procedure": True,
                "description": "How to start a Zoom meeting",
                "steps": [
                    {"action": "open_url", "url": "https://zoom.us"},
                    {"action": "click", "target": "Start Meeting"},
                ],
            },
        )
        wf = r.json()
        assert "procedure_id" in wf
        low = (
            await client.post(
                "/v1/jarvus/store",
                headers=h,
                json={"text": "User likes dark mode", "type": "preference", "importance": 0.5},
            )
        ).json()
        high = (
            await client.post(
                "/v1/jarvus/store",
                headers=h,
                json={"text": "User is allergic to peanuts", "type": "fact", "importance": 3},
            )
        ).json()
        await client.post(
            "/v1/jarvus/store",
            headers=h,
            json={"text": "Other namespace fact", "type": "fact", "namespace": "agent_config"},
        )

        eps = (await client.get("/v1/jarvus/episodes", headers=h)).json()["episodes"]
        assert len(eps) == 3 and all(e["type"] == "episode" for e in eps)
        procs = (
            await client.get("/v1/jarvus/procedures", headers=h, params={"query": "zoom meeting"})
        ).json()["procedures"]
        assert procs[0]["memory_id"] == wf["procedure_id"] and procs[0]["score"] > 0
        facts = (await client.get("/v1/jarvus/facts", headers=h)).json()["facts"]
        assert [f["memory_id"] for f in facts] == [high["memory_id"], low["memory_id"]]
        assert facts[0]["last_accessed"] is None
        facts = (await client.get("/v1/jarvus/facts", headers=h, params={"limit": 1})).json()
        assert facts["facts"][0]["last_accessed"] is not None  # set by the previous retrieval
        # no word matches "ubmi", but Jarvus's substring search does
        substring = (
            await client.get("/v1/jarvus/episodes", headers=h, params={"query": "ubmi"})
        ).json()["episodes"]
        assert [(e["memory_id"], e["score"]) for e in substring] == [(action_id, 0.0)]
        r = await client.post(
            "/v1/jarvus/store",
            headers=h,
            json={
                "text": "User likes light mode",
                "type": "preference",
                "memory_id": low["memory_id"],
            },
        )
        assert r.json()["updated"] is True
        ns = (await client.get("/v1/jarvus/namespaces", headers=h)).json()["namespaces"]
        assert {n["namespace"]: n["items"] for n in ns} == {"default": 6, "agent_config": 1}
        r = await client.delete(f"/v1/jarvus/memories/{high['memory_id']}", headers=h)
        assert r.json()["deleted"] is True
        left = await pool.fetchval(
            "SELECT count(*) FROM memory_items WHERE id = $1::uuid", high["memory_id"]
        )
        assert left == 0


async def test_checkpoint_lineage_follows_parents(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    base = "/v1/threads/thread_1234/checkpoints"
    async with running(app) as client:
        a = (
            await client.post(
                base, headers=h, json={"state": {"messages": ["hi"]}, "checkpoint_id": "a"}
            )
        ).json()
        b = (
            await client.post(
                base, headers=h, json={"state": {"messages": ["hi", "yo"]}, "checkpoint_id": "b"}
            )
        ).json()
        c = (
            await client.post(
                base, headers=h, json={"state": {"n": 3}, "checkpoint_id": "c", "parent_id": "a"}
            )
        ).json()
        assert (a["parent_id"], a["step"]) == (None, 0)
        assert (b["parent_id"], b["step"]) == ("a", 1)
        assert (c["parent_id"], c["step"]) == ("a", 1)
        latest = (await client.get(f"{base}/latest", headers=h)).json()
        assert latest["checkpoint_id"] == "c" and latest["state"] == {"n": 3}
        chain = (await client.get(f"{base}/b/lineage", headers=h)).json()["lineage"]
        assert [x["checkpoint_id"] for x in chain] == ["b", "a"]
        r = await client.post(base, headers=h, json={"state": {}, "parent_id": "zzz"})
        assert r.status_code == 400 and "zzz" in r.json()["detail"]
        assert (
            await client.get("/v1/threads/other/checkpoints/latest", headers=h)
        ).status_code == 404
        assert (await client.delete(base, headers=h)).json()["deleted"] == 3


async def test_a_checkpoint_after_the_highest_step_is_refused_not_a_500(
    make_settings, pool, user_id
):
    """Found by the fuzz run: a parent at step 2**31 - 1 made the next step overflow
    the integer column (500); it is a 400 naming the step, and an explicit step works."""
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    base = "/v1/threads/t/checkpoints"
    async with running(app) as client:
        top = {"state": {}, "checkpoint_id": "top", "step": 2**31 - 1}
        assert (await client.post(base, headers=h, json=top)).status_code == 200
        r = await client.post(base, headers=h, json={"state": {}, "checkpoint_id": "next"})
        assert r.status_code == 400 and "step" in r.json()["detail"]
        given = {"state": {}, "checkpoint_id": "next", "step": 7}
        r = await client.post(base, headers=h, json=given)
        assert r.status_code == 200 and (r.json()["parent_id"], r.json()["step"]) == ("top", 7)


async def test_the_facts_list_and_the_summary_count_the_same_facts(make_settings, pool, user_id):
    """A fact the extractor learned (no key) is listed by GET /v1/facts and counted by
    /v1/facts/summary: both said otherwise before (0 listed, 1 counted)."""
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    candidate = FactCandidate(
        subject="user", content="Tim ran a charity race on 6 May 2023.", source="heuristic"
    )
    fact = Fact(candidate, candidate.content, confidence=0.7, source_context=None)
    plan = FactPlan(store=[fact])
    async with running(app) as client:
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
            await apply_plan(
                conn,
                plan,
                user_id=user_id,
                episode_id=None,
                extractor_name="offline",
                heuristic=True,
            )
        await regenerate_user_summary(pool, user_id, OfflineExtractor().narrative)
        listed = (await client.get("/v1/facts", headers=h)).json()
        summary = (await client.get("/v1/facts/summary", headers=h)).json()
        assert listed["total"] == summary["fact_count"] == 1
        [fact] = listed["facts"]
        assert fact["value"] == candidate.content and fact["key"] is None
        assert fact["source"] == "heuristic"


async def test_the_readmes_saved_home_city_is_in_the_sections_context(make_settings, pool, user_id):
    """Issue 29.15: README's example saves location/home_city = Bergen, then asks
    "where do I live?" with policy sections: the value alone shares no word with the
    question, so the search missed it; the section now carries the user's keyed facts,
    labelled with their key. Issue 29.20: a conversation's summary is under its own
    heading, not "Recent User Actions and Feedback"."""
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    await pool.execute(
        "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at, "
        "summary_text) VALUES (gen_random_uuid(), $1, 'slack', 'C1', now(), now(), $2)",
        user_id,
        "Planned the garden with Sarah",
    )
    async with running(app) as client:
        saved = await client.post(
            "/v1/facts",
            headers=h,
            json={"category": "location", "key": "home_city", "value": "Bergen"},
        )
        assert saved.status_code == 200, saved.text
        r = await client.post(
            "/v1/jarvus/feedback",
            headers=h,
            json={"suggestion_id": "s1", "user_response": "thumbs up", "notes": "liked it"},
        )
        assert r.status_code == 200, r.text
        r = await client.post(
            "/v1/context",
            headers=h,
            json={"message": "where do I live?", "policy": "sections", "token_budget": 400},
        )
        assert r.status_code == 200, r.text
        out = r.json()
    text = out["text"]
    assert "- location / home city: Bergen" in text, text
    assert [f["content"] for f in out["sections"]["facts"]] == ["Bergen"]
    conversations = text.index("Recent Conversations:")
    assert text.index("- Planned the garden with Sarah") > conversations
    actions = text.index("Recent User Actions and Feedback:")
    assert actions < text.index("- Feedback: thumbs up (liked it)") < conversations
