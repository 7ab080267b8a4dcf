"""Nova's ``memory`` surface (spec 3.2): search, add, get, archive, list_themes; and
consolidation (issue 31.2): ask for a run, read how the last one went."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter

from services.query.api import responses as R
from services.query.api.auth import Caller, UserId
from services.query.api.deps import Pool, Pub, ReadPool, State
from services.query.memory import items as ms
from services.query.memory.requests import AddIn, SearchIn
from services.query.memory.search import memory_search
from shared.memory import observations as consolidation

router = APIRouter(prefix="/v1/memory", tags=["memory (Nova)"])


@router.post(
    "/search",
    summary="Hybrid search: 70% semantic + 30% full-text; '*' = newest",
    response_model=R.SearchOut,
)
async def search(
    body: SearchIn, who: Caller, user_id: UserId, pool: ReadPool, state: State
) -> dict[str, Any]:
    stored = who.embedding_settings(user_id)  # read with the key: no second round trip
    result = await memory_search(state, pool, body.params(), user_id=user_id, stored=stored)
    return result.as_dict()


@router.post(
    "/add",
    summary="Store a memory; its embedding is computed asynchronously",
    response_model=R.AddedOut,
)
async def add(body: AddIn, user_id: UserId, pool: Pool, pub: Pub) -> ms.Added:
    item = ms.NewMemory(
        type=body.type, content=body.content, theme=body.theme, tags=tuple(body.tags)
    )
    return await ms.add_memory(pool, pub, user_id=user_id, item=item)


@router.get(
    "/items/{item_id}",
    summary="Every field of one memory and its embedding state",
    response_model=R.MemoryItemOut,
)
async def get(item_id: uuid.UUID, user_id: UserId, pool: ReadPool) -> dict[str, Any]:
    return await ms.get_memory(pool, user_id=user_id, item_id=item_id)


@router.post(
    "/items/{item_id}/archive",
    summary="Archive a memory (kept, hidden from search)",
    response_model=R.ArchivedOut,
)
async def archive(item_id: uuid.UUID, user_id: UserId, pool: Pool, pub: Pub) -> ms.Archived:
    return await ms.archive_memory(pool, pub, user_id=user_id, item_id=item_id)


@router.delete(
    "/items/{item_id}",
    summary="Delete a memory and its embedding for good",
    response_model=R.DeletedOut,
)
async def delete(item_id: uuid.UUID, user_id: UserId, pool: Pool, pub: Pub) -> ms.Deleted:
    return await ms.delete_memory(pool, pub, user_id=user_id, item_id=item_id)


@router.get(
    "/themes", summary="The user's themes with their active item counts", response_model=R.ThemesOut
)
async def themes(user_id: UserId, pool: ReadPool) -> ms.Themes:
    return await ms.list_themes(pool, user_id=user_id)


@router.post(
    "/consolidate",
    status_code=202,
    summary="Ask for a consolidation run (related memories into observations, the cap, "
    "the profile); the extractor runs it in the background",
    response_model=R.ConsolidationOut,
)
async def consolidate(user_id: UserId, pool: Pool) -> consolidation.Consolidation:
    return consolidation.Consolidation.of(user_id, await consolidation.request(pool, user_id))


@router.get(
    "/consolidation",
    summary="How the user's last consolidation run went, and whether one is asked for",
    response_model=R.ConsolidationOut,
)
async def consolidation_state(user_id: UserId, pool: Pool) -> consolidation.Consolidation:
    return consolidation.Consolidation.of(user_id, await consolidation.state(pool, user_id))
