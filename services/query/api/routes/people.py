"""Ash's memory surface: remember, recall, and the people a user has mentioned."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub, ReadPool, Settings
from services.query.api.edges import NAMED_IN_BODY
from services.query.api.embedder import QueryEmbedder
from services.query.people import results as pr
from services.query.people.calls import do_recall, do_remember
from services.query.people.models import RecallIn, RememberIn
from shared.memory.people import list_people, resolve_person

router = APIRouter(prefix="/v1", tags=["people"])


class PersonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="'my wife', 'Sarah' or 'my wife Sarah'"
    )
    content_hint: Annotated[str, Field(max_length=10_000)] | None = Field(
        default=None, description="text that may name the missing half ('her name is Sarah')"
    )


@router.post(
    "/remember",
    summary="Store one fact or a batch, with subjects, expiry and scope",
    response_model=R.RememberedOut,
    responses=NAMED_IN_BODY,  # a shared memory for a chat the caller is not in
)
async def remember(
    body: RememberIn,
    settings: Settings,
    user_id: UserId,
    pool: Pool,
    pub: Pub,
    embedder: QueryEmbedder,
) -> pr.RememberedMemories:
    return await do_remember(
        pool,
        pub,
        user_id,
        body,
        embedder=embedder,
        embedding_dim=settings.embedding_dim,
        actor=f"api:{user_id}",
    )


@router.post(
    "/recall", summary="Search memory, optionally about one person", response_model=R.RecallOut
)
async def recall(
    body: RecallIn,
    settings: Settings,
    user_id: UserId,
    pool: ReadPool,
    embedder: QueryEmbedder,
) -> dict[str, Any]:
    return await do_recall(
        pool, user_id, body, embedder=embedder, embedding_dim=settings.embedding_dim
    )


@router.get(
    "/people",
    summary="The people this user has told the assistant about",
    response_model=R.PeopleOut,
)
async def people(user_id: UserId, pool: ReadPool) -> pr.People:
    return pr.People(people=[pr.KnownPerson.of(p) for p in await list_people(pool, user_id)])


@router.post(
    "/people",
    summary="Resolve a reference to a person, creating a first mention",
    response_model=R.ResolvedPersonOut,
)
async def resolve(body: PersonIn, user_id: UserId, pool: Pool) -> pr.ResolvedPerson:
    async with pool.acquire() as conn:
        res = await resolve_person(
            conn, user_id, body.reference, content_hint=body.content_hint, actor=f"api:{user_id}"
        )
    return pr.ResolvedPerson.of(res)
