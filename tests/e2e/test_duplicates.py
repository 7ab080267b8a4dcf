"""No duplicates on any write path (issue 31), on real PostgreSQL and Redis with the
real local model: five facts, each said in three wordings -- through ``remember``,
``memory add`` and the extractor -- leave five live memories and ten confirmations;
identical adds racing store one memory.

The query service and the embedder run with their consumers: ``remember`` embeds
inline (its duplicate check runs in the writer), ``memory add`` is embedded later
by the embedder (the check runs when its vector lands, in the query service's
supersession consumer), the extractor's facts are planned and written by its own
functions with the system's embedder and the offline extractor's ``same_fact``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.extractor.facts import apply_plan, plan_facts
from services.extractor.settings import ExtractorSettings
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.embeddings import resolve_embedder
from shared.llm.offline import OfflineExtractor
from shared.llm.schemas import FactCandidate
from tests.support import running, wait_for

# (remember, memory add, the extractor): the same fact in three wordings.
FACTS = [
    (
        "I prefer Celsius for temperatures.",
        "Prefers temperatures in Celsius",
        "The user prefers Celsius for temperatures.",
    ),
    (
        "I work as a nurse at the city hospital.",
        "Works as a nurse at the city hospital",
        "User works as a nurse at the city hospital.",
    ),
    ("I'm allergic to peanuts.", "allergic to peanuts", "The user is allergic to peanuts."),
    (
        "I drink my coffee black every morning.",
        "Drinks coffee black every morning",
        "User drinks black coffee every morning.",
    ),
    (
        "I live in Silver Spring, Maryland.",
        "Lives in Silver Spring, Maryland",
        "The user lives in Silver Spring, Maryland.",
    ),
]

LIVE = """
SELECT count(*) AS memories, coalesce(sum(confirmations), 0) AS confirmations,
       count(*) FILTER (WHERE embedding_state = 'pending') AS pending
FROM memory_items WHERE user_id = $1 AND status = 'active' AND superseded_at IS NULL
"""


async def _settled(pool: asyncpg.Pool, user_id: str, memories: int, confirmations: int) -> bool:
    row = await pool.fetchrow(LIVE, user_id)
    assert row is not None
    return bool(
        row["pending"] == 0
        and row["memories"] == memories
        and row["confirmations"] == confirmations
    )


async def test_five_facts_in_three_wordings_are_five_memories_confirmed_ten_times(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    query = make_settings(QuerySettings)
    embedder = make_settings(EmbedderSettings, stream_prefix=query.stream_prefix)
    _, secret = await create_key(pool, user_id=user_id)
    me = {"Authorization": f"Bearer {secret}"}
    async with running(embedder_app(embedder)), running(query_app(query)) as api:
        for said, _, _ in FACTS:
            r = await api.post("/v1/remember", headers=me, json={"content": said})
            assert r.status_code == 200, r.text
            assert r.json()["memories"][0]["embedding_state"] == "ready"
        for _, said, _ in FACTS:
            r = await api.post("/v1/memory/add", headers=me, json={"type": "fact", "content": said})
            assert r.status_code == 200, r.text
        # The extractor's write path: plan (embed, compare) then apply, as its service does.
        extractor = OfflineExtractor()
        settings = make_settings(ExtractorSettings)
        plan = await plan_facts(
            pool,
            user_id=user_id,
            candidates=[
                FactCandidate(
                    subject="user",
                    about="user",
                    content=said,
                    category="preference",
                    source="user_explicit",
                    stated_by="user",
                )
                for _, _, said in FACTS
            ],
            occurred_at=datetime.now(UTC),
            embedder=await resolve_embedder(pool, user_id, settings),
            same_fact=extractor.same_fact,
            dim=settings.embedding_dim,
        )
        async with pool.acquire() as conn, conn.transaction():
            await apply_plan(
                conn,
                plan,
                user_id=user_id,
                episode_id=None,
                extractor_name=extractor.name,
                heuristic=True,
            )
        try:
            await wait_for(
                lambda: _settled(pool, user_id, len(FACTS), 2 * len(FACTS)),
                timeout=90,
                interval=0.2,
                message="5 live memories, 10 confirmations",
            )
        except AssertionError as exc:
            state = await pool.fetch(
                "SELECT content, confirmations, embedding_state, superseded_at IS NULL AS live "
                "FROM memory_items WHERE user_id = $1 ORDER BY created_at",
                user_id,
            )
            raise AssertionError(f"{exc}: {[tuple(r) for r in state]}") from None
        # Each survivor says where it was said again; each merged row left an audit line.
        rows = await pool.fetch(
            "SELECT id, content, sources FROM memory_items WHERE user_id = $1 "
            "AND status = 'active' AND superseded_at IS NULL",
            user_id,
        )
        assert sorted(r["content"] for r in rows) == sorted(f[0] for f in FACTS)
        assert all(len(r["sources"]) == 2 for r in rows), [r["sources"] for r in rows]
        merged = await pool.fetchval(
            "SELECT count(*) FROM memory_items WHERE user_id = $1 AND superseded_at IS NOT NULL",
            user_id,
        )
        audited = await pool.fetchval(
            "SELECT count(*) FROM audit_log WHERE user_id = $1 AND action = 'merge'", user_id
        )
        assert merged == audited
        # The context lists each fact once.
        ctx = await api.post(
            "/v1/context", headers=me, json={"message": "what temperature unit do I use?"}
        )
        assert ctx.status_code == 200, ctx.text
        assert ctx.json()["text"].count("Celsius") == 1, ctx.text


async def test_identical_adds_racing_store_one_memory(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    _, secret = await create_key(pool, user_id=user_id)
    me = {"Authorization": f"Bearer {secret}"}
    async with running(query_app(make_settings(QuerySettings))) as api:
        body = {"type": "preference", "content": "Likes window seats"}
        answers = await asyncio.gather(
            *(api.post("/v1/memory/add", headers=me, json=body) for _ in range(8))
        )
        again = await api.post(
            "/v1/memory/add",
            headers=me,
            json={"type": "fact", "content": "  likes WINDOW seats. "},
        )
    assert all(a.status_code == 200 for a in [*answers, again])
    ids = {a.json()["id"] for a in [*answers, again]}
    assert len(ids) == 1
    assert sum(not a.json()["confirmed"] for a in answers) == 1 and again.json()["confirmed"]
    row = await pool.fetchrow(
        "SELECT count(*) AS n, max(confirmations) AS c FROM memory_items WHERE user_id = $1",
        user_id,
    )
    assert row is not None and (row["n"], row["c"]) == (1, 8)
    actions = await pool.fetch(
        "SELECT action, count(*) FROM audit_log WHERE user_id = $1 AND entity = 'memory' "
        "GROUP BY 1 ORDER BY 1",
        user_id,
    )
    assert [tuple(a) for a in actions] == [("confirm", 8), ("create", 1)]
