"""Navi's facts: save (upsert), search, forget, list, and the narrative summary."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub, ReadPool, State
from services.query.api.edges import NAMED_IN_BODY
from services.query.embeddings.query import lists_newest
from services.query.memory import facts as fs
from services.query.memory.requests import FactIn, FactListIn, FactSearchIn, ForgetIn, SummaryIn

router = APIRouter(prefix="/v1/facts", tags=["facts (Navi)"])


@router.post("", summary="Save a fact: upsert on (category, key)", response_model=R.SavedFactOut)
async def save(body: FactIn, user_id: UserId, pool: Pool, pub: Pub) -> fs.SavedFact:
    return await fs.save_fact(pool, pub, user_id=user_id, **body.model_dump())


@router.post(
    "/search",
    summary="Find facts: vector (distance < 0.3) first, then trigram/ILIKE",
    response_model=R.FactsOut,
)
async def search(
    body: FactSearchIn, request: Request, user_id: UserId, pool: ReadPool, state: State
) -> fs.Facts:
    vector = None
    if not lists_newest(body.query):  # else the newest facts: nothing to embed
        vector = await state.query_vector(pool, user_id=user_id, text=body.query)
    return await fs.search_facts(
        pool,
        user_id=user_id,
        query=body.query,
        limit=body.limit,
        vector=vector,
        trigram=state.trigram,
    )


@router.post(
    "/forget",
    summary="Delete the fact(s) with this key (optionally in one category)",
    response_model=R.ForgottenOut,
    responses=NAMED_IN_BODY,
)
async def forget(body: ForgetIn, user_id: UserId, pool: Pool, pub: Pub) -> fs.Forgotten:
    return await fs.forget_fact(pool, pub, user_id=user_id, key=body.key, category=body.category)


@router.get("", summary="All facts, sorted and paginated", response_model=R.FactPageOut)
async def list_(user_id: UserId, pool: ReadPool, q: Annotated[FactListIn, Query()]) -> fs.FactPage:
    return await fs.list_facts(pool, user_id=user_id, **q.model_dump())


@router.get("/summary", summary="The user's narrative summary", response_model=R.SummaryOut)
async def get_summary(user_id: UserId, pool: ReadPool) -> fs.Summary:
    return await fs.get_summary(pool, user_id=user_id)


@router.put("/summary", summary="Replace the user's narrative summary", response_model=R.SummaryOut)
async def set_summary(body: SummaryIn, user_id: UserId, pool: Pool) -> fs.Summary:
    return await fs.set_summary(pool, user_id=user_id, summary=body.summary)
