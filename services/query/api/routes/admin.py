"""Admin-only reads across users (Navi's read_all)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from services.query.api import responses as R
from services.query.api.auth import Admin
from services.query.api.deps import Pool, State
from services.query.memory import facts as fs
from services.query.memory.requests import AdminSearchIn, FactListIn
from services.query.memory.search import memory_search

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post(
    "/search",
    summary="Search one user's or every user's memories (admin key)",
    response_model=R.AdminSearchOut,
)
async def search(body: AdminSearchIn, who: Admin, pool: Pool, state: State) -> dict[str, Any]:
    result = await memory_search(
        state, pool, body.params(), user_id=body.user_id, all_users=body.user_id is None
    )
    out = result.as_dict()
    for item, hit in zip(out["results"], result.hits, strict=True):
        item["user_id"] = hit.user_id
    return out


@router.get(
    "/facts",
    summary="Facts of every user, sorted and paginated (admin key)",
    response_model=R.FactPageOut,
)
async def facts(who: Admin, pool: Pool, q: Annotated[FactListIn, Query()]) -> fs.FactPage:
    return await fs.list_facts(pool, user_id=None, **q.model_dump())
