"""Consolidation on real PostgreSQL: observations with evidence, refinement with history,
the cap's compaction with audit, the profile rebuilt, one user never touching another's."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from services.extractor import consolidation
from services.extractor.consolidation import consolidate_user, related
from services.extractor.settings import ExtractorSettings
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.llm.jobs import build_extractor
from shared.llm.offline import OfflineExtractor, observation
from shared.memory import observations as asks
from shared.memory.writer import NewItem, insert_items
from tests.extractor.scripted_llm import Reply, ScriptedLLM
from tests.query.helpers import auth
from tests.support import running

DIM = 384
BY = ("test", "consolidation-test")
T0 = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


def vec(topic: int, own: int, share: float) -> list[float]:
    """A unit vector: ``share`` of it along the topic's axis, the rest along its own axis;
    two of one topic are ``share`` similar."""
    v = np.zeros(DIM, dtype=np.float32)
    v[topic] = np.sqrt(share)
    v[100 + own] = np.sqrt(1 - share)
    return v.tolist()


async def add(
    pool: asyncpg.Pool,
    user_id: str,
    content: str,
    vector: list[float],
    *,
    days: int = 0,
    subjects: tuple[uuid.UUID, ...] = (),
    importance: float = 0.5,
) -> uuid.UUID:
    async with pool.acquire() as conn:
        written = await insert_items(
            conn,
            user_id,
            [
                NewItem(
                    type="fact",
                    content=content,
                    vector=vector,
                    embedded_by=BY,
                    subjects=subjects,
                    importance=importance,
                    valid_from=T0 + timedelta(days=days),
                    source="test",
                )
            ],
            actor="test",
        )
    [item] = written.items
    assert item.inserted, content
    return item.id


async def observations(pool: asyncpg.Pool, user_id: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        """SELECT o.id, o.content, o.data, o.key, o.status,
                  array(SELECT e.memory_id FROM observation_evidence e
                        WHERE e.observation_id = o.id) AS evidence
           FROM memory_items o WHERE o.user_id = $1 AND o.type = 'observation'
           ORDER BY o.created_at""",
        user_id,
    )


async def audits(pool: asyncpg.Pool, user_id: str, action: str, entity: str = "memory") -> list:
    return await pool.fetch(
        "SELECT entity_id, details, actor FROM audit_log "
        "WHERE user_id = $1 AND action = $2 AND entity = $3 ORDER BY id",
        user_id,
        action,
        entity,
    )


async def seed(pool: asyncpg.Pool, user_id: str) -> dict[str, Any]:
    """Three memories of one topic (0.85 alike), two about Caroline (0.65 alike: related only
    through her), one alone."""
    caroline = uuid.uuid4()
    ids = {
        "run1": await add(pool, user_id, "Tim runs every morning before work", vec(0, 0, 0.85)),
        "run2": await add(
            pool, user_id, "Tim trains for the Bergen marathon", vec(0, 1, 0.85), days=3
        ),
        "run3": await add(
            pool, user_id, "Tim bought trail shoes for rocky paths", vec(0, 2, 0.85), days=9
        ),
        "car1": await add(
            pool, user_id, "Caroline paints lakes", vec(1, 3, 0.65), subjects=(caroline,), days=1
        ),
        "car2": await add(
            pool,
            user_id,
            "Caroline shows her work at a gallery",
            vec(1, 4, 0.65),
            subjects=(caroline,),
            days=2,
        ),
        "alone": await add(pool, user_id, "Tim dislikes olives", vec(2, 5, 0.85), days=4),
    }
    return {"ids": ids, "caroline": caroline}


def test_related_reuses_the_dedupe_bands() -> None:
    a, b = frozenset({uuid.uuid4()}), frozenset()
    assert related(0.80, b, b) and not related(0.79, b, b)
    assert related(0.60, a, a) and not related(0.59, a, a) and not related(0.70, a, b)


def test_offline_observation_keeps_statements_whole_and_once() -> None:
    text = observation(
        ["tim runs every morning", "Tim runs every morning.", "Tim trains for a marathon;"]
    )
    assert text == "Tim runs every morning. Tim trains for a marathon."


async def test_clusters_become_observations_with_their_evidence(
    pool: asyncpg.Pool, user_id: str
) -> None:
    s = await seed(pool, user_id)
    ids = s["ids"]
    stats = await consolidate_user(pool, user_id, OfflineExtractor())
    assert (stats.memories, stats.created, stats.refined) == (6, 2, 0)
    obs = await observations(pool, user_id)
    by_evidence = {frozenset(o["evidence"]): o for o in obs}
    running = by_evidence[frozenset({ids["run1"], ids["run2"], ids["run3"]})]
    painting = by_evidence[frozenset({ids["car1"], ids["car2"]})]
    assert running["key"] == f"seed:{ids['run1']}"
    ev = running["data"]["evidence"]
    assert ev["count"] == 3
    assert ev["first_seen"].startswith("2023-05-08") and ev["last_seen"].startswith("2023-05-17")
    assert set(ev["memory_ids"]) == {str(ids[k]) for k in ("run1", "run2", "run3")}
    assert running["data"]["rule"] == "offline" and running["data"]["history"] == []
    # every statement, whole
    for k in ("run1", "run2", "run3"):
        content = await pool.fetchval("SELECT content FROM memory_items WHERE id = $1", ids[k])
        assert content + "." in running["content"]
    assert "Caroline paints lakes." in painting["content"]
    row = await pool.fetchrow("SELECT subjects FROM memory_items WHERE id = $1", painting["id"])
    assert row["subjects"] == [s["caroline"]]
    created = {a["entity_id"] for a in await audits(pool, user_id, "create")}
    assert {str(o["id"]) for o in obs} <= created
    # the one alone is in no observation; the memories themselves stay active
    assert all(ids["alone"] not in o["evidence"] for o in obs)
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM memory_items WHERE user_id = $1 AND type = 'fact' "
            "AND status = 'active'",
            user_id,
        )
        == 6
    )


async def test_new_evidence_refines_the_observation_and_keeps_its_history(
    pool: asyncpg.Pool, user_id: str
) -> None:
    s = await seed(pool, user_id)
    await consolidate_user(pool, user_id, OfflineExtractor())
    [running] = [o for o in await observations(pool, user_id) if s["ids"]["run1"] in o["evidence"]]
    new = await add(
        pool, user_id, "Tim finished the Bergen marathon in four hours", vec(0, 6, 0.85), days=30
    )
    stats = await consolidate_user(pool, user_id, OfflineExtractor())
    assert (stats.created, stats.refined) == (0, 1)
    [after] = [o for o in await observations(pool, user_id) if o["id"] == running["id"]]
    assert new in after["evidence"] and len(after["evidence"]) == 4
    assert after["content"] != running["content"]
    assert "Tim finished the Bergen marathon in four hours." in after["content"]
    assert after["data"]["history"] == [
        {"content": running["content"], "evidence": 3, "rule": "offline"}
    ]
    assert after["data"]["evidence"]["count"] == 4
    assert after["data"]["evidence"]["last_seen"].startswith("2023-06-07")
    [update] = [
        a for a in await audits(pool, user_id, "update") if a["entity_id"] == str(after["id"])
    ]
    assert update["details"]["previous"] == running["content"]
    assert update["details"]["added"] == [str(new)] and update["actor"] == "consolidation"
    # nothing new: nothing written
    again = await consolidate_user(pool, user_id, OfflineExtractor())
    assert (again.created, again.refined) == (0, 0)
    assert len(await audits(pool, user_id, "update")) == 1


async def test_the_cap_archives_consolidated_unread_memories_lowest_ranked_first_with_audit(
    pool: asyncpg.Pool, user_id: str
) -> None:
    s = await seed(pool, user_id)
    ids = s["ids"]
    await pool.execute(
        "UPDATE memory_items SET importance = 0.9 WHERE id = $1", ids["run2"]
    )  # ranked higher
    await pool.execute(  # read: never archived by the cap
        "UPDATE memory_items SET access_count = 1, last_accessed_at = now() WHERE id = $1",
        ids["run1"],
    )
    stats = await consolidate_user(pool, user_id, OfflineExtractor(), cap=3)
    # 6 live: 3 over the cap; eligible (consolidated, unread): run2, run3, car1, car2
    assert (stats.archived, stats.over_cap) == (3, 0)
    archived = {
        r["id"]
        for r in await pool.fetch(
            "SELECT id FROM memory_items WHERE user_id = $1 AND status = 'archived'", user_id
        )
    }
    assert archived == {ids["run3"], ids["car1"], ids["car2"]}
    lines = await audits(pool, user_id, "archive")
    assert {a["entity_id"] for a in lines} == {str(i) for i in archived}
    assert all(a["details"]["reason"] == "compaction" and a["details"]["cap"] == 3 for a in lines)
    # the observations still hold them as evidence, and stay visible
    obs = await observations(pool, user_id)
    assert all(o["status"] == "active" for o in obs)
    assert archived <= {m for o in obs for m in o["evidence"]}
    # a cap only partly met: run2 goes; the read one and the one no observation holds stay
    more = await consolidate_user(pool, user_id, OfflineExtractor(), cap=1)
    assert (more.archived, more.over_cap) == (1, 1)
    live = await pool.fetch(
        "SELECT id FROM memory_items WHERE user_id = $1 AND type = 'fact' AND status = 'active'",
        user_id,
    )
    assert {r["id"] for r in live} == {ids["run1"], ids["alone"]}


async def test_the_profile_is_rebuilt_from_the_observations_with_audit(
    pool: asyncpg.Pool, user_id: str
) -> None:
    s = await seed(pool, user_id)
    await pool.execute(
        "INSERT INTO user_summaries (user_id, summary, fact_count) VALUES ($1, 'old text', 1)",
        user_id,
    )
    stats = await consolidate_user(pool, user_id, OfflineExtractor())
    assert stats.profile
    summary = await pool.fetchval("SELECT summary FROM user_summaries WHERE user_id = $1", user_id)
    [running] = [o for o in await observations(pool, user_id) if s["ids"]["run1"] in o["evidence"]]
    assert running["content"] in summary
    assert "Tim dislikes olives." in summary  # a fact no observation holds
    assert summary.count("Tim runs every morning before work") == 1  # held: said once
    [line] = await audits(pool, user_id, "update", entity="profile")
    assert line["details"]["previous"] == "old text" and line["actor"] == "consolidation"


async def test_one_user_never_touches_another(pool: asyncpg.Pool, user_id: str) -> None:
    other = f"{user_id}-other"
    await seed(pool, user_id)
    await seed(pool, other)
    assert await asks.request(pool, user_id) is not None
    assert await asks.request(pool, "no-such-user-" + uuid.uuid4().hex) is None
    # the requested user first; run only it
    await pool.execute(
        "INSERT INTO consolidation_state (user_id, finished_at) VALUES ($1, now()) "
        "ON CONFLICT (user_id) DO UPDATE SET finished_at = now(), requested_at = NULL",
        other,
    )
    done = await consolidation.run_due(
        pool, OfflineExtractor(), min_gap=timedelta(days=3650), batch=50
    )
    assert user_id in done and other not in done
    assert len(await observations(pool, user_id)) == 2
    assert await observations(pool, other) == []
    foreign = await pool.fetchval(
        "SELECT count(*) FROM observation_evidence e JOIN memory_items m ON m.id = e.memory_id "
        "WHERE e.user_id = $1 AND m.user_id <> $1",
        user_id,
    )
    assert foreign == 0
    st = await asks.state(pool, user_id)
    assert st is not None and st["requested_at"] is None and st["stats"]["created"] == 2
    # served: not due again until it has new memories and the gap has passed
    again = await consolidation.run_due(
        pool, OfflineExtractor(), min_gap=timedelta(days=3650), batch=50
    )
    assert user_id not in again


async def test_with_a_model_the_model_writes_the_observation(
    pool: asyncpg.Pool, user_id: str, make_settings: Callable[..., Any]
) -> None:
    await seed(pool, user_id)
    with ScriptedLLM() as llm:
        llm.push(
            Reply({"observation": "Tim is training for a marathon."}),
            Reply(content="not json at all"),  # the second cluster: invalid, twice
            Reply(content="still not json"),
            Reply({"summary": "Tim trains for a marathon; Caroline paints."}),
        )
        settings = make_settings(
            ExtractorSettings, llm_base_url=llm.base_url, llm_model="m", llm_invalid_retries=1
        )
        extractor, client = build_extractor(settings)
        try:
            stats = await consolidate_user(pool, user_id, extractor)
        finally:
            assert client is not None
            await client.aclose()
        prompts = llm.prompts()
    assert stats.created == 2 and stats.model_fallbacks == 1
    assert "Tim runs every morning before work" in prompts[0]
    texts = {o["content"]: o["data"]["rule"] for o in await observations(pool, user_id)}
    assert texts["Tim is training for a marathon."] == "model"
    assert sorted(texts.values()) == ["model", "offline"]
    summary = await pool.fetchval("SELECT summary FROM user_summaries WHERE user_id = $1", user_id)
    assert summary == "Tim trains for a marathon; Caroline paints."


async def test_asked_for_over_http_run_by_the_extractor_and_listed_in_search(
    pool: asyncpg.Pool, user_id: str, make_settings: Callable[..., Any]
) -> None:
    await seed(pool, user_id)
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        r = await client.get("/v1/memory/consolidation", headers=h)
        assert r.status_code == 200 and r.json()["finished_at"] is None
        r = await client.post("/v1/memory/consolidate", headers=h)
        assert r.status_code == 202, r.text
        assert r.json()["requested_at"] is not None
        done = await consolidation.run_due(
            pool, OfflineExtractor(), min_gap=timedelta(days=3650), batch=1000
        )
        assert done[user_id].created == 2
        body = (await client.get("/v1/memory/consolidation", headers=h)).json()
        assert body["requested_at"] is None and body["finished_at"] is not None
        assert body["stats"]["created"] == 2
        r = await client.post(
            "/v1/memory/search", headers=h, json={"query": "*", "types": ["observation"]}
        )
        assert r.status_code == 200, r.text
        found = r.json()["results"]
        assert len(found) == 2 and {f["type"] for f in found} == {"observation"}
        item = (await client.get(f"/v1/memory/items/{found[0]['id']}", headers=h)).json()
        assert item["data"]["evidence"]["count"] in (2, 3)
