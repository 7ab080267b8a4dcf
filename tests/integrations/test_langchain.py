"""engram_langchain against a running query service and ingest: the chat history
publishes turns that the pipeline stores (and reads them back, in order, by role), the
retriever finds memories (search) and builds context."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from engram_client import AsyncEngram, BadRequest, ValidationFailed
from engram_client import _calls as c
from engram_langchain import EngramChatMessageHistory, EngramRetriever
from shared.apikeys import create_key
from tests.live import LiveQuery
from tests.support import wait_for


@pytest.fixture
async def key(live_query: LiveQuery, pool: asyncpg.Pool) -> str:
    _, secret = await create_key(pool, user_id=f"lc-{uuid.uuid4().hex[:8]}")
    return secret


async def test_history_publishes_turns_the_pipeline_stores(
    live_query: LiveQuery, live_ingest: None, key: str, pool: asyncpg.Pool
) -> None:
    history = EngramChatMessageHistory("chat-1", live_query.url, key, display_name="Sam")
    sent = [
        SystemMessage("You are a travel assistant."),
        HumanMessage("I moved to Lisbon last spring"),
        AIMessage("Noted: you live in Lisbon."),
        ToolMessage("sunny, 24C", tool_call_id="call-7"),
    ]
    await history.aadd_messages(sent)

    async def stored() -> bool:
        return len(await history.aget_messages()) == len(sent)

    await wait_for(stored, timeout=30, interval=0.2, message="the turns stored by ingest")
    back = await history.aget_messages()
    assert [(type(m), m.content) for m in back] == [(type(m), m.content) for m in sent]
    assert isinstance(back[3], ToolMessage) and back[3].tool_call_id == "call-7"
    # the same messages again (a retry): their ids keep them stored once
    await history.aadd_messages(back)
    history.add_user_message("And I work as a nurse")
    await wait_for(
        lambda: _count(history, len(sent) + 1), timeout=30, interval=0.2, message="5th turn"
    )
    assert [m.content for m in history.messages][-1] == "And I work as a nurse"
    # the turns are engram's conversation: its message search finds them
    async with AsyncEngram(live_query.url, key) as client:
        found = await client.messages.search("Lisbon", chat_id="chat-1")
        assert "Lisbon" in str(found)
        other = EngramChatMessageHistory(
            "chat-2", client=None, base_url=live_query.url, api_key=key
        )
        assert other.messages == []
    # another user's chat of the same id is another chat (the provider is the user's)
    _, other_key = await create_key(pool, user_id=f"lc-{uuid.uuid4().hex[:8]}")
    theirs = EngramChatMessageHistory("chat-1", live_query.url, other_key)
    theirs.add_user_message("I am someone else")
    await wait_for(lambda: _count(theirs, 1), timeout=30, interval=0.2, message="their turn")
    assert len(history.messages) == len(sent) + 1
    async with (
        AsyncEngram(live_query.url, key) as mine,
        AsyncEngram(live_query.url, other_key) as b,
    ):
        ours = await mine.send(c.turns_publish("chat-1", "user", "x", external_message_id="x1"))
        their = await b.send(c.turns_publish("chat-1", "user", "y", external_message_id="y1"))
        assert ours.provider != their.provider
    # clear what is stored: wait for "x" first, or ingest may store it after the clear
    await wait_for(
        lambda: _count(history, len(sent) + 2), timeout=30, interval=0.2, message="turn x"
    )
    history.clear()
    assert history.messages == []
    assert [m.content for m in theirs.messages][0] == "I am someone else"


async def _count(history: EngramChatMessageHistory, n: int) -> bool:
    return len(await history.aget_messages()) == n


async def test_turn_bad_input_is_4xx(live_query: LiveQuery, key: str) -> None:
    async with AsyncEngram(live_query.url, key) as client:
        with pytest.raises(ValidationFailed, match="role"):
            await client.send(c.turns_publish("chat", "robot", "hi"))  # type: ignore[arg-type]
        with pytest.raises((ValidationFailed, BadRequest), match="occurred_at"):
            await client.send(c.turns_publish("chat", "user", "hi", occurred_at="1200-01-01"))


async def test_retriever_search_and_context(live_query: LiveQuery, key: str) -> None:
    long = "Sam is allergic to peanuts. " + "He also keeps a long list of foods. " * 12
    async with AsyncEngram(live_query.url, key) as client:
        await client.memory.add(long.strip(), type="fact")
        await client.memory.add("Sam loves green curry from the Thai place", type="preference")
    retriever = EngramRetriever(base_url=live_query.url, api_key=key, k=3)
    docs = await retriever.ainvoke("peanuts")
    assert docs and docs[0].page_content.startswith("Sam is allergic to peanuts")
    assert docs[0].page_content == long.strip()  # the whole memory, not the snippet
    assert docs[0].metadata["type"] == "fact"
    assert [d.page_content for d in retriever.invoke("curry")] == [
        "Sam loves green curry from the Thai place"
    ]
    async with AsyncEngram(live_query.url, key) as client:
        await client.facts.save("diet", "allergy", "peanuts")
    context = EngramRetriever(
        base_url=live_query.url, api_key=key, mode="context", policy="sections"
    )
    [built] = await context.ainvoke("what should Sam avoid eating?")
    assert "peanuts" in built.page_content and built.metadata["policy"] == "sections"
    [again] = context.invoke("what should Sam avoid eating?")
    assert again.page_content == built.page_content
