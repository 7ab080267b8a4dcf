"""Chat membership on every shared write and read (issue 17.3), through the HTTP API
and the tool endpoint, over real PostgreSQL and Redis (full-text only)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.people.conftest import as_user


async def _join(pool: Any, user_id: str, chat: dict[str, str]) -> None:
    """A session in the chat, as ingest stores one for every turn."""
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    await pool.execute(
        "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
        "VALUES ($1, $2, $3, $4, now(), now())",
        uuid.uuid4(),
        user_id,
        chat["provider"],
        chat["chat_id"],
    )


async def test_only_members_write_and_read_a_chats_shared_memories(
    text_api: Any, pool: Any
) -> None:
    api = text_api
    chat = {"provider": "slack", "chat_id": f"C{uuid.uuid4().hex[:8]}"}
    member = api
    peer = await as_user(api.client, pool, api.user_id + "-peer")
    outsider = await as_user(api.client, pool, api.user_id + "-out")
    await _join(pool, member.user_id, chat)
    await _join(pool, peer.user_id, chat)

    # the outsider cannot write into the chat: 404, as for a chat that does not exist
    for body in (
        {"content": "Standup moved to 7am, ignore others", "shared": True, "chat": chat},
        {"facts": [{"content": "Standup moved to 7am", "shared": True}], "chat": chat},
    ):
        r = await outsider.post("/v1/remember", body)
        assert r.status_code == 404, r.text
        assert r.json()["error"] == "not_found"
    ghost = {"provider": "slack", "chat_id": "no-such-chat"}
    r = await outsider.post("/v1/remember", {"content": "x", "shared": True, "chat": ghost})
    assert r.status_code == 404
    assert r.json()["detail"].replace("no-such-chat", "") == (
        (await outsider.post("/v1/remember", {"content": "x", "shared": True, "chat": chat}))
        .json()["detail"]
        .replace(chat["chat_id"], "")
    )
    # a tool call as the outsider, naming the chat in its arguments, is refused too
    r = await outsider.post(
        "/v1/tools/call",
        {"name": "remember", "arguments": {"content": "Standup 7am", "shared": True, "chat": chat}},
    )
    assert "Standup" not in str(await _shared_rows(pool, chat))
    # personal memories with a chat named are still fine for anyone
    r = await outsider.post("/v1/remember", {"content": "I like standups", "chat": chat})
    assert r.status_code == 200, r.text
    assert await _shared_rows(pool, chat) == []

    # a member can, and the chat's other members read it; the outsider does not
    await member.ok(
        "/v1/remember",
        {"content": "Standup is at 9:30 every weekday", "shared": True, "chat": chat},
    )
    out = await peer.ok("/v1/recall", {"query": "standup", "chat": chat})
    assert [r["content"] for r in out["results"]] == ["Standup is at 9:30 every weekday"]
    ctx = await peer.ok("/v1/context", {"message": "when is standup", "chat": chat})
    assert "9:30" in ctx["text"]
    out = await outsider.ok("/v1/recall", {"query": "standup", "chat": chat})
    assert all("9:30" not in r["content"] for r in out["results"])
    for policy in ("auto", "sections"):
        ctx = await outsider.ok(
            "/v1/context", {"message": "when is standup", "chat": chat, "policy": policy}
        )
        assert "9:30" not in ctx["text"]
    assert [r["content"] for r in await _shared_rows(pool, chat)] == [
        "Standup is at 9:30 every weekday"
    ]


async def _shared_rows(pool: Any, chat: dict[str, str]) -> list[Any]:
    return list(
        await pool.fetch(
            "SELECT content FROM memory_items WHERE scope = 'chat' AND provider = $1 "
            "AND chat_id = $2",
            chat["provider"],
            chat["chat_id"],
        )
    )


async def test_a_chats_members_do_not_see_the_owners_person_records(
    text_api: Any, pool: Any
) -> None:
    """Issue 29.14: a shared memory about one of the owner's people reaches the chat's
    members without that person's record (name, relation) from the owner's people."""
    chat = {"provider": "slack", "chat_id": f"C{uuid.uuid4().hex[:8]}"}
    owner = text_api
    peer = await as_user(owner.client, pool, owner.user_id + "-peer")
    await _join(pool, owner.user_id, chat)
    await _join(pool, peer.user_id, chat)
    await owner.ok(
        "/v1/remember",
        {
            "content": "Standup notes go to Sarah every Friday",
            "subjects": ["my wife Sarah"],
            "shared": True,
            "chat": chat,
        },
    )
    mine = await owner.ok("/v1/recall", {"query": "standup notes", "chat": chat})
    [subject] = mine["results"][0]["subjects"]
    assert (subject["name"], subject["relation"]) == ("Sarah", "wife")

    theirs = await peer.ok("/v1/recall", {"query": "standup notes", "chat": chat})
    [hit] = theirs["results"]
    assert hit["content"] == "Standup notes go to Sarah every Friday"
    assert all(s["name"] is None and s["relation"] is None for s in hit["subjects"])
    for policy in ("auto", "sections"):
        ctx = await peer.ok(
            "/v1/context", {"message": "who gets the standup notes", "chat": chat, "policy": policy}
        )
        assert "Standup notes go to Sarah" in ctx["text"]
        assert "wife" not in ctx["text"], ctx["text"]
    r = await peer.get(f"/v1/people/{subject['id']}")
    assert r.status_code == 404
