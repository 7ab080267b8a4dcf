"""POST /v1/context under each policy."""

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from services.query.context.command import ContextQuery
from services.query.context.theme_hints import HintCache, assemble_tools
from services.query.tools.memory import GUIDANCE
from shared.db import create_pool
from shared.memory.writer import NewItem, insert_items
from tests.people.conftest import DownEmbedder, as_user, make_app
from tests.support import running


async def add_messages(pool, user_id, texts, *, model=None, days_ago=1):
    """Past messages in one episode; embedded with ``model`` when given."""
    ep = uuid.uuid4()
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    await pool.execute(
        "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
        "VALUES ($1, $2, 'cli', 'c1', now(), now())",
        ep,
        user_id,
    )
    vectors = await model.embed(texts) if model else [None] * len(texts)
    at = datetime.now(UTC) - timedelta(days=days_ago)
    for i, (text, vec) in enumerate(zip(texts, vectors, strict=True)):
        await pool.execute(
            "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
            "content, occurred_at, embedding, embedding_state, embedding_model) "
            "VALUES ($1, $2, $3, 'cli', 'c1', 'user', $4, $5, $6, $7, $8)",
            uuid.uuid4(),
            user_id,
            ep,
            text,
            at + timedelta(seconds=i),
            vec,
            "ready" if vec is not None else "pending",
            model.model if model else None,
        )


@pytest.mark.slow
async def test_auto_includes_similar_messages_only_and_fits_the_budget(
    semantic_api, pool, local_model
):
    api = semantic_api
    await add_messages(
        pool,
        api.user_id,
        [
            "We had amazing pasta carbonara at Luigi's, my wife loved it",
            "Can you fix the TypeScript build error in the CI pipeline?",
        ],
        model=local_model,
    )
    await api.ok(
        "/v1/remember", {"content": "Sarah likes Italian food", "subjects": ["my wife Sarah"]}
    )
    ctx = await api.ok("/v1/context", {"message": "Where should I take my wife for dinner?"})
    contents = [m["content"] for m in ctx["sections"]["messages"]]
    assert contents == ["We had amazing pasta carbonara at Luigi's, my wife loved it"]
    assert all(m["similarity"] >= 0.3 for m in ctx["sections"]["messages"])
    assert re.search(r"- \[\d{4}-\d\d-\d\d, user\] ", ctx["text"])  # its date and role
    assert "TypeScript" not in ctx["text"]
    assert ctx["tokens"] <= ctx["token_budget"] and ctx["truncated"] == 0

    small = await api.ok(
        "/v1/context", {"message": "Where should I take my wife for dinner?", "token_budget": 60}
    )
    assert small["tokens"] <= 60 and small["truncated"] > 0
    assert "**Sarah** (wife)" in small["text"]  # known people come first


async def test_auto_falls_back_to_full_text_with_a_warning_when_the_provider_is_down(
    make_settings, pool, user_id
):
    async with running(make_app(make_settings, DownEmbedder())) as client:
        api = await as_user(client, pool, user_id)
        stored = await api.ok("/v1/remember", {"content": "User's cat is called Miso"})
        assert stored["memories"][0]["embedding_state"] == "pending"
        assert "embedding provider unavailable" in stored["warning"]
        await add_messages(pool, user_id, ["Miso knocked the plant over again"])
        ctx = await api.ok("/v1/context", {"message": "what is my cat called? Miso?"})
        assert ctx["retrieval"] == "full_text"
        assert "embedding provider unavailable" in ctx["warning"]
        assert "[Memory] User's cat is called Miso" in ctx["text"]
        assert "Miso knocked the plant over again" in ctx["text"]
        rec = await api.ok("/v1/recall", {"query": "cat"})
        assert rec["retrieval"] == "full_text" and rec["warning"]
        assert rec["results"][0]["content"] == "User's cat is called Miso"


async def add_themes(pool, user_id, n, *, long_names=False):
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    for i in range(n):
        slug = f"theme-{i:03d}"
        name = (f"A very long theme display name number {i:03d} " * 3) if long_names else slug
        await pool.execute(
            "INSERT INTO themes (user_id, slug, display_name) VALUES ($1, $2, $3)",
            user_id,
            slug,
            name,
        )
        items = [
            NewItem(type="fact", content=f"SECRET item {j} of {slug}", theme=slug)
            for j in range(1 + i % 7)
        ]
        async with pool.acquire() as conn:
            await insert_items(conn, user_id, items, actor="test")


@pytest.mark.parametrize("long_names", [False, True])
async def test_tools_policy_stays_under_2kb_with_200_themes_and_no_content(
    text_api, pool, long_names
):
    api = text_api
    await add_themes(pool, api.user_id, 200, long_names=long_names)
    ctx = await api.ok("/v1/context", {"policy": "tools", "message": "hi"})
    text = ctx["text"]
    assert len(text.encode()) <= 2048
    assert "memory.search" in text and "memory.archive" in text and "status='any'" in text
    assert "memory.list_themes()" in text
    assert "SECRET" not in text
    shown = ctx["sections"]["themes"]
    assert 5 <= len(shown) <= 10
    assert shown[0]["active"] == 7  # top themes by active count
    assert ctx["truncated"] == 200 - len(shown)
    if not long_names:
        assert len(text.encode()) <= 1024


async def test_tools_hints_are_cached_per_agent_run(text_api, pool):
    api = text_api
    await add_themes(pool, api.user_id, 2)
    first = await api.ok("/v1/context", {"policy": "tools", "agent_run_id": "run-1"})
    assert first["sections"]["hints"][0]["cached"] is False
    async with pool.acquire() as conn:
        travel = [
            NewItem(type="fact", content=f"x{i}", theme="travel", theme_name="travel")
            for i in range(9)
        ]
        await insert_items(conn, api.user_id, travel, actor="test")
    again = await api.ok("/v1/context", {"policy": "tools", "agent_run_id": "run-1"})
    assert again["sections"]["hints"][0]["cached"] is True and "travel" not in again["text"]
    fresh = await api.ok("/v1/context", {"policy": "tools", "agent_run_id": "run-2"})
    assert "  - travel (9)" in fresh["text"]


async def test_tools_policy_says_memory_is_unavailable_when_the_database_fails(infra, user_id):
    broken = await create_pool(infra.database_url, max_size=1)
    await broken.close()
    out = await assemble_tools(broken, user_id, ContextQuery(policy="tools"), HintCache(GUIDANCE))
    assert "Memory tools are unavailable" in out.text and out.warning
    assert "memory.search" not in out.text


async def test_tools_policy_is_unavailable_when_memory_is_off_for_the_user(text_api, pool):
    api = text_api
    await pool.execute(
        "UPDATE users SET metadata = '{\"memory_enabled\": false}' WHERE id = $1", api.user_id
    )
    ctx = await api.ok("/v1/context", {"policy": "tools"})
    assert ctx["text"].startswith("## Memory\nMemory tools are unavailable")


async def test_summary_policy_injects_the_narrative_summary(text_api, pool):
    api = text_api
    empty = await api.ok("/v1/context", {"policy": "summary", "message": "hi"})
    assert empty["text"] == "" and empty["tokens"] == 0
    summary = "The user is a data engineer in Berlin. " * 40
    await pool.execute(
        "INSERT INTO user_summaries (user_id, summary, fact_count) VALUES ($1, $2, 12)",
        api.user_id,
        summary,
    )
    ctx = await api.ok("/v1/context", {"policy": "summary", "message": "hi"})
    assert ctx["text"].startswith("## What I remember about the user\n\nThe user is a data")
    small = await api.ok("/v1/context", {"policy": "summary", "token_budget": 60})
    assert small["tokens"] <= 60 and small["truncated"] == 1
    assert small["text"].endswith("Berlin.")


async def test_sections_policy_has_facts_episodes_and_procedures(text_api, pool):
    api = text_api
    uid = api.user_id
    await api.ok("/v1/remember", {"content": "User prefers dark mode", "type": "preference"})
    action = {
        "type": "chrome_action",
        "action": "click",
        "target": "button#submit",
        "url": "https://example.com",
        "result": "success",
    }
    zoom = {
        "description": "How to start a Zoom meeting",
        "steps": [{"action": "open_url"}, {"action": "click"}],
    }
    async with pool.acquire() as conn:
        items = [
            NewItem(type="episode", content="clicked submit", data=action),
            NewItem(type="procedure", content="zoom", data=zoom),
        ]
        await insert_items(conn, uid, items, actor="test")
    ctx = await api.ok("/v1/context", {"policy": "sections", "message": "dark mode zoom"})
    text = ctx["text"]
    assert "User Preferences and Facts:\n- User prefers dark mode" in text
    assert (
        "Recent User Actions and Feedback:\n- Chrome: click button#submit on "
        "https://example.com (success)"
    ) in text
    assert "Available Workflows/Procedures:\n- How to start a Zoom meeting (steps: 2)" in text
    assert [f["content"] for f in ctx["sections"]["facts"]] == ["User prefers dark mode"]


async def test_context_rejects_bad_input_and_needs_a_key(text_api):
    api = text_api
    r = await api.post("/v1/context", {"policy": "everything"})
    assert r.status_code == 422 and "policy" in r.json()["detail"]
    r = await api.post("/v1/context", {"token_budget": 0})
    assert r.status_code == 422
    r = await api.client.post("/v1/context", json={"message": "hi"})
    assert r.status_code == 401
