"""Ash's scenarios through the API with the real local embedding model."""

import uuid

import pytest

from shared.embeddings import vector_index
from shared.events import MemoryChanged
from tests.people.conftest import as_user, make_app
from tests.support import running, wait_for

pytestmark = pytest.mark.slow


async def test_what_does_my_wife_like_finds_the_food_memory_about_sarah(semantic_api):
    api = semantic_api
    await api.ok(
        "/v1/remember", {"content": "Remember my wife's name is Sarah", "subjects": ["my wife"]}
    )
    food = await api.ok(
        "/v1/remember", {"content": "She likes Italian food", "subjects": ["my wife"]}
    )
    await api.ok(
        "/v1/remember",
        {
            "facts": [
                {"content": "User prefers concise responses"},
                {"content": "User's dentist appointment is on Friday"},
            ]
        },
    )
    out = await api.ok("/v1/recall", {"query": "what does my wife like?", "about": "my wife"})
    assert out["about"]["resolved"] is True and out["about"]["person"]["name"] == "Sarah"
    assert out["retrieval"] == "hybrid" and out["warning"] is None
    top = out["results"][0]
    assert top["id"] == food["memories"][0]["id"]
    assert top["subjects"][0]["name"] == "Sarah"
    # only memories about Sarah
    assert all(r["subjects"] and r["subjects"][0]["name"] == "Sarah" for r in out["results"])

    ctx = await api.ok("/v1/context", {"message": "What does my wife like?", "policy": "auto"})
    assert "- **Sarah** (wife)" in ctx["text"]
    assert "[Memory (about Sarah)] She likes Italian food" in ctx["text"]
    assert "[Memory] User prefers concise responses" in ctx["text"]
    assert ctx["sections"]["memories"][0]["content"] == "She likes Italian food"


async def test_an_unknown_person_gives_unfiltered_results(semantic_api):
    api = semantic_api
    await api.ok("/v1/remember", {"content": "User loves hiking in the Alps"})
    out = await api.ok("/v1/recall", {"query": "hiking", "about": "my uncle Bob"})
    assert out["about"]["resolved"] is False and "not filtered" in out["about"]["note"]
    assert [r["content"] for r in out["results"]] == ["User loves hiking in the Alps"]
    assert (await api.get("/v1/people")).json()["people"] == []  # recall creates nobody


async def test_blue_supersedes_red_and_history_keeps_red(semantic_api):
    api = semantic_api
    red = await api.ok("/v1/remember", {"content": "User's favorite color is red"})
    red_id = red["memories"][0]["id"]
    blue = await api.ok("/v1/remember", {"content": "User's favorite color is blue"})
    blue_id = blue["memories"][0]["id"]
    assert blue["memories"][0]["superseded"] == [red_id]

    now = await api.ok("/v1/recall", {"query": "favorite color"})
    assert [r["id"] for r in now["results"]] == [blue_id]
    ctx = await api.ok("/v1/context", {"message": "what is my favorite color?"})
    # blue is the memory; red shows only as what it replaced (issue 27.4), never as a line
    lines = ctx["text"].splitlines()
    assert any(
        "is blue" in line and "before: User's favorite color is red" in line for line in lines
    )
    assert not any(line.startswith("- [Memory] User's favorite color is red") for line in lines)

    history = await api.ok("/v1/recall", {"query": "favorite color", "include_superseded": True})
    by_id = {r["id"]: r for r in history["results"]}
    assert set(by_id) == {red_id, blue_id}
    assert by_id[red_id]["superseded_by"] == blue_id and by_id[red_id]["superseded_at"]
    assert by_id[blue_id]["superseded_by"] is None


async def test_different_subjects_never_conflict(semantic_api):
    api = semantic_api
    a = await api.ok("/v1/remember", {"content": "Favorite color is green", "subjects": ["Sarah"]})
    b = await api.ok("/v1/remember", {"content": "Favorite color is green", "subjects": ["John"]})
    c = await api.ok("/v1/remember", {"content": "Favorite color is green"})
    assert b["memories"][0]["superseded"] == [] and c["memories"][0]["superseded"] == []
    out = await api.ok("/v1/recall", {"query": "favorite color", "limit": 10})
    assert {r["id"] for r in out["results"]} == {
        a["memories"][0]["id"],
        b["memories"][0]["id"],
        c["memories"][0]["id"],
    }


async def test_a_batch_stores_every_fact_with_its_own_subjects(semantic_api):
    api = semantic_api
    out = await api.ok(
        "/v1/remember",
        {
            "facts": [
                {"content": "Sarah and John are getting married", "subjects": ["Sarah", "John"]},
                {
                    "content": "John is allergic to peanuts",
                    "subjects": ["John"],
                    "expires_in_days": 30,
                },
            ]
        },
    )
    first, second = out["memories"]
    assert [s["name"] for s in first["subjects"]] == ["Sarah", "John"]
    assert second["subjects"][0]["id"] == first["subjects"][1]["id"]
    assert second["expires_at"] is not None and first["expires_at"] is None
    about_sarah = await api.ok("/v1/recall", {"query": "wedding", "about": "Sarah"})
    assert [r["id"] for r in about_sarah["results"]] == [first["id"]]


async def test_supersession_waits_for_the_embedder_when_vectors_are_not_ready(
    make_settings, pool, user_id, local_model
):
    """No embedder in the query service: rows stay pending; when the embedder fills the
    vectors and reports them ready on `memories`, the consumer supersedes — even when
    the newer memory is embedded first."""
    app = make_app(make_settings, None)
    async with running(app) as client:
        api = await as_user(client, pool, user_id)
        red = await api.ok("/v1/remember", {"content": "User's favorite color is red"})
        blue = await api.ok("/v1/remember", {"content": "User's favorite color is blue"})
        red_id = uuid.UUID(red["memories"][0]["id"])
        blue_id = uuid.UUID(blue["memories"][0]["id"])
        assert red["memories"][0]["embedding_state"] == "pending"
        assert blue["memories"][0]["superseded"] == []

        async def embed_and_report(memory_id: uuid.UUID, text: str) -> None:
            [vec] = await local_model.embed([text])
            await pool.execute(
                "UPDATE memory_items SET embedding = $2, embedding_state = 'ready', "
                "embedding_model = $3, embedding_provider = 'local', embedded_at = now() "
                "WHERE id = $1",
                memory_id,
                vec,
                local_model.model,
            )
            await app.state.runtime.publisher.publish(
                "memories", [MemoryChanged(memory_id=memory_id, user_id=user_id, change="embedded")]
            )

        await embed_and_report(blue_id, "User's favorite color is blue")
        await embed_and_report(red_id, "User's favorite color is red")

        async def red_superseded():
            return await pool.fetchval(
                "SELECT superseded_by FROM memory_items WHERE id = $1", red_id
            )

        assert await wait_for(red_superseded, message="red superseded") == blue_id
        assert (
            await pool.fetchval("SELECT superseded_at FROM memory_items WHERE id = $1", blue_id)
            is None
        )
        audit = await pool.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = 'supersede' AND entity_id = $1",
            str(red_id),
        )
        assert audit == 1


@pytest.mark.parametrize("listed", [False, True], ids=["exact", "vector-index"])
async def test_users_see_only_their_own_and_their_chats_memories(semantic_api, pool, listed):
    """Both paths of the semantic side: exact, and (listed users) the partial HNSW
    index for their own memories with the chat's shared ones compared exactly."""
    api = semantic_api
    chat = {"provider": "slack", "chat_id": f"C{uuid.uuid4().hex[:8]}"}
    await api.ok("/v1/remember", {"content": "My bank PIN hint is the dog's birthday"})
    await pool.execute(  # the author is in the chat too (issue 17.3)
        "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
        "VALUES ($1, $2, $3, $4, now(), now())",
        uuid.uuid4(),
        api.user_id,
        chat["provider"],
        chat["chat_id"],
    )
    await api.ok(
        "/v1/remember",
        {"content": "Team standup is at 9:30 every weekday", "shared": True, "chat": chat},
    )
    stranger = await as_user(api.client, pool, api.user_id + "-x")
    member = await as_user(api.client, pool, api.user_id + "-m")
    await pool.execute(
        "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
        "VALUES ($1, $2, $3, $4, now(), now())",
        uuid.uuid4(),
        member.user_id,
        chat["provider"],
        chat["chat_id"],
    )
    if listed:
        for uid in (api.user_id, stranger.user_id, member.user_id):
            await vector_index.index_user(pool, uid, "memory", settle_s=0)
        assert await pool.fetchval(
            "SELECT bool_and(vector_indexed) FROM memory_items WHERE user_id = $1", api.user_id
        )

    for who in (stranger, member):
        out = await who.ok("/v1/recall", {"query": "bank PIN hint", "limit": 10})
        assert all("PIN" not in r["content"] for r in out["results"])
        ctx = await who.ok("/v1/context", {"message": "bank PIN", "chat": chat})
        assert "PIN" not in ctx["text"]
    out = await stranger.ok("/v1/recall", {"query": "standup", "chat": chat})
    assert out["results"] == []
    out = await member.ok("/v1/recall", {"query": "standup", "chat": chat})
    assert [r["content"] for r in out["results"]] == ["Team standup is at 9:30 every weekday"]
    assert out["results"][0]["scope"] == "chat"
    # the owner sees it in that chat only, not in personal recall
    mine = await api.ok("/v1/recall", {"query": "standup"})
    assert all(r["scope"] == "personal" for r in mine["results"])
    ctx = await member.ok("/v1/context", {"message": "when is standup?", "chat": chat})
    assert "[Shared memory] Team standup is at 9:30" in ctx["text"]


async def test_expired_memories_are_not_recalled(semantic_api, pool):
    api = semantic_api
    out = await api.ok(
        "/v1/remember", {"content": "User is in Lisbon this week", "expires_in_days": 7}
    )
    mid = uuid.UUID(out["memories"][0]["id"])
    assert (await api.ok("/v1/recall", {"query": "Lisbon"}))["results"]
    await pool.execute(
        "UPDATE memory_items SET expires_at = now() - interval '1 minute' WHERE id = $1", mid
    )
    assert (await api.ok("/v1/recall", {"query": "Lisbon"}))["results"] == []


async def test_the_default_embedder_is_the_users_provider_local_by_default(
    make_settings, pool, user_id
):
    """No resolver passed: shared.embeddings.resolve_embedder picks the local model."""
    from services.query.app import create_app
    from services.query.settings import QuerySettings

    async with running(create_app(make_settings(QuerySettings))) as client:
        api = await as_user(client, pool, user_id)
        await api.ok("/v1/remember", {"content": "User's favorite color is red"})
        blue = await api.ok("/v1/remember", {"content": "User's favorite color is blue"})
        assert blue["memories"][0]["embedding_state"] == "ready"
        assert len(blue["memories"][0]["superseded"]) == 1
        out = await api.ok("/v1/recall", {"query": "which colour do I like?"})
        assert out["retrieval"] == "hybrid"
        assert out["results"][0]["content"] == "User's favorite color is blue"
