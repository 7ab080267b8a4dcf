"""Jarvus: actions, feedback, workflow executions, plain stores, typed retrieval, namespaces."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub, State
from services.query.api.edges import NAMED_IN_BODY
from services.query.embeddings.query import MAX_SEARCH_CHARS, described
from services.query.memory import items as ms
from services.query.memory import jarvus as js
from services.query.memory import jarvus_results as jr
from services.query.memory.requests import ActionIn, FeedbackIn, StoreIn, WorkflowIn

router = APIRouter(prefix="/v1/jarvus", tags=["agent memory (Jarvus)"])

Limit = Annotated[int, Query(ge=1, le=50, description="results, 1-50")]
QueryText = Annotated[
    str | None, Query(max_length=MAX_SEARCH_CHARS, description=described("what to look for"))
]
Namespace = Annotated[str, Query(min_length=1, max_length=255)]


@router.post(
    "/actions",
    summary="Store a browser/app action as an episode",
    response_model=R.StoredOut,
)
async def action(body: ActionIn, user_id: UserId, pool: Pool, pub: Pub) -> jr.Stored:
    return await js.store_action(
        pool,
        pub,
        user_id=user_id,
        action=body.model_dump(exclude={"namespace"}),
        namespace=body.namespace,
    )


@router.post(
    "/feedback",
    summary="Store the user's feedback on a suggestion as an episode",
    response_model=R.StoredOut,
)
async def feedback(body: FeedbackIn, user_id: UserId, pool: Pool, pub: Pub) -> jr.Stored:
    return await js.store_feedback(
        pool,
        pub,
        user_id=user_id,
        feedback=body.model_dump(exclude={"namespace"}),
        namespace=body.namespace,
    )


@router.post(
    "/workflows",
    summary="Store a workflow execution (and a procedure if asked)",
    response_model=R.StoredOut,
)
async def workflow(body: WorkflowIn, user_id: UserId, pool: Pool, pub: Pub) -> jr.Stored:
    return await js.store_workflow(
        pool,
        pub,
        user_id=user_id,
        workflow=body.model_dump(exclude={"namespace", "store_as_procedure"}),
        namespace=body.namespace,
        store_as_procedure=body.store_as_procedure,
    )


@router.post(
    "/store",
    summary="Store (or, with memory_id, update) a plain memory",
    response_model=R.StoredOut,
    responses=NAMED_IN_BODY,
)
async def store(body: StoreIn, user_id: UserId, pool: Pool, pub: Pub) -> jr.Stored:
    return await js.store_plain(pool, pub, user_id=user_id, **body.model_dump())


@router.get(
    "/episodes", summary="Episodes, most relevant first", response_model=R.JarvusEpisodesOut
)
async def episodes(
    user_id: UserId,
    pool: Pool,
    state: State,
    query: QueryText = None,
    limit: Limit = 5,
    namespace: Namespace = "default",
) -> jr.Episodes:
    return jr.Episodes(
        episodes=await js.retrieve(
            state,
            pool,
            user_id=user_id,
            kind="episodes",
            query=query,
            limit=limit,
            namespace=namespace,
        )
    )


@router.get(
    "/facts", summary="Facts and preferences, most relevant first", response_model=R.JarvusFactsOut
)
async def facts(
    user_id: UserId,
    pool: Pool,
    state: State,
    query: QueryText = None,
    limit: Limit = 5,
    namespace: Namespace = "default",
) -> jr.Facts:
    return jr.Facts(
        facts=await js.retrieve(
            state,
            pool,
            user_id=user_id,
            kind="facts",
            query=query,
            limit=limit,
            namespace=namespace,
        )
    )


@router.get(
    "/procedures",
    summary="Procedures and workflows, most relevant first",
    response_model=R.JarvusProceduresOut,
)
async def procedures(
    user_id: UserId,
    pool: Pool,
    state: State,
    query: QueryText = None,
    limit: Limit = 5,
    namespace: Namespace = "default",
) -> jr.Procedures:
    return jr.Procedures(
        procedures=await js.retrieve(
            state,
            pool,
            user_id=user_id,
            kind="procedures",
            query=query,
            limit=limit,
            namespace=namespace,
        )
    )


@router.get(
    "/namespaces", summary="The user's namespaces with item counts", response_model=R.NamespacesOut
)
async def namespaces(user_id: UserId, pool: Pool) -> jr.Namespaces:
    return await js.namespaces(pool, user_id=user_id)


@router.delete(
    "/memories/{memory_id}",
    summary="Delete a memory (its embedding goes with it)",
    response_model=R.DeletedOut,
)
async def delete(memory_id: uuid.UUID, user_id: UserId, pool: Pool, pub: Pub) -> ms.Deleted:
    return await ms.delete_memory(pool, pub, user_id=user_id, item_id=memory_id, actor="jarvus")
