"""LangChain's chat message history on engram's conversation turns.

``add_messages`` publishes each message as a turn to engram's ``turns`` stream, as a
chat platform does, so the pipeline stores it in the chat's episode, embeds it and
learns memories from it; ``messages`` reads the chat's stored turns back. Ingest
stores a turn shortly after it is published, so a read right after a write may not
show it yet. Each message goes with an id (the message's own, else a new one), so a
retried publish stores it once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from engram_client import AsyncEngram, ClientPair, Engram
from engram_client import _calls as c
from engram_client.models import Turn

Role = Literal["user", "assistant", "tool", "system"]
ROLES: dict[str, Role] = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


class EngramChatMessageHistory(BaseChatMessageHistory):
    """The turns of one chat (``chat_id``) of the key's user (the user's own chats:
    engram gives them a provider of the user's, so no one else can join them).

    ``limit``: how many of the last turns ``messages`` returns (at most 500).
    """

    def __init__(
        self,
        chat_id: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        display_name: str | None = None,
        limit: int = 100,
        user: str | None = None,
        client: Engram | None = None,
        aclient: AsyncEngram | None = None,
    ) -> None:
        self.chat_id, self.display_name, self.limit = chat_id, display_name, limit
        self._clients = ClientPair(base_url, api_key, user=user, client=client, aclient=aclient)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        call = c.turns_list(self.chat_id, limit=self.limit)
        return [_message(t) for t in self._clients.sync.send(call).turns]

    async def aget_messages(self) -> list[BaseMessage]:
        call = c.turns_list(self.chat_id, limit=self.limit)
        return [_message(t) for t in (await self._clients.aio.send(call)).turns]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        for call in self._calls(messages):
            self._clients.sync.send(call)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        for call in self._calls(messages):
            await self._clients.aio.send(call)

    def clear(self) -> None:
        self._clients.sync.send(c.turns_delete(self.chat_id))

    async def aclear(self) -> None:
        await self._clients.aio.send(c.turns_delete(self.chat_id))

    def _calls(self, messages: Sequence[BaseMessage]) -> list[c.Call[Any]]:
        # the turns' times keep the messages' order (ingest orders a chat by time)
        start = datetime.now(UTC)
        out: list[c.Call[Any]] = []
        for i, m in enumerate(messages):
            role = ROLES.get(m.type)
            if role is None:
                raise ValueError(f"message type {m.type!r} is not one of {sorted(ROLES)}")
            metadata: dict[str, Any] = {"type": m.type}
            if isinstance(m, ToolMessage):
                metadata["tool_call_id"] = m.tool_call_id
            if m.name:
                metadata["name"] = m.name
            out.append(
                c.turns_publish(
                    self.chat_id,
                    role,
                    m.text if isinstance(m.content, list) else str(m.content),
                    display_name=self.display_name if role == "user" else None,
                    external_message_id=m.id or uuid.uuid4().hex,
                    occurred_at=(start + timedelta(microseconds=i)).isoformat(),
                    metadata=metadata,
                )
            )
        return out


def _message(t: Turn) -> BaseMessage:
    meta = t.metadata or {}
    common: dict[str, Any] = {"content": t.content, "id": t.external_message_id}
    if meta.get("name"):
        common["name"] = meta["name"]
    if t.role == "user":
        return HumanMessage(**common)
    if t.role == "assistant":
        return AIMessage(**common)
    if t.role == "system":
        return SystemMessage(**common)
    return ToolMessage(tool_call_id=str(meta.get("tool_call_id", "")), **common)
