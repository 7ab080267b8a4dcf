"""A LangChain retriever over engram: its memory search, or the context it builds."""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from engram_client import AsyncEngram, ClientPair, Engram
from engram_client.models import Context, MemoryHit, MemoryItem

ELLIPSIS = "…"


class EngramRetriever(BaseRetriever):
    """``EngramRetriever(base_url=..., api_key=...)``.

    ``mode="search"`` (default): engram's memory search (hybrid: semantic and
    full-text), one Document per memory (its whole content), best first, at most
    ``k``. ``mode="context"``: one Document holding the context engram builds for
    the query as a message under ``policy`` (``auto``, ``sections``, ``summary``,
    ``tools``), its sections in the metadata.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str | None = None
    api_key: str | None = None
    user: str | None = None
    mode: Literal["search", "context"] = "search"
    k: int = 5
    policy: Literal["auto", "tools", "summary", "sections"] = "auto"
    token_budget: int | None = None
    client: Engram | None = None
    aclient: AsyncEngram | None = None
    _clients: ClientPair = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self._clients = ClientPair(
            self.base_url, self.api_key, user=self.user, client=self.client, aclient=self.aclient
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        engram = self._clients.sync
        if self.mode == "context":
            return [
                _context_doc(
                    engram.context(query, policy=self.policy, token_budget=self.token_budget)
                )
            ]
        hits = engram.memory.search(query, limit=self.k).results
        full = {h.id: engram.memory.get(h.id) for h in hits if h.content_snippet.endswith(ELLIPSIS)}
        return [_memory_doc(h, full.get(h.id)) for h in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        engram = self._clients.aio
        if self.mode == "context":
            built = await engram.context(query, policy=self.policy, token_budget=self.token_budget)
            return [_context_doc(built)]
        hits = (await engram.memory.search(query, limit=self.k)).results
        full = {
            h.id: await engram.memory.get(h.id)
            for h in hits
            if h.content_snippet.endswith(ELLIPSIS)
        }
        return [_memory_doc(h, full.get(h.id)) for h in hits]


def _memory_doc(hit: MemoryHit, item: MemoryItem | None) -> Document:
    return Document(
        page_content=item.content if item is not None else hit.content_snippet,
        id=hit.id,
        metadata={
            "id": hit.id,
            "type": hit.type,
            "theme": hit.theme,
            "score": hit.score,
            "created_at": hit.created_at,
        },
    )


def _context_doc(built: Context) -> Document:
    return Document(
        page_content=built.text,
        metadata={
            "policy": built.policy,
            "tokens": built.tokens,
            "retrieval": built.retrieval,
            "sections": built.sections,
        },
    )
