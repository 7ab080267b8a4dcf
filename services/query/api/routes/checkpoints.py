"""Short-term thread checkpoints (Jarvus 1.2): save, latest, lineage, list, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool
from services.query.memory import checkpoints as cs
from services.query.memory.requests import CheckpointIn

router = APIRouter(prefix="/v1/threads/{thread_id}/checkpoints", tags=["checkpoints (Jarvus)"])
Thread = Annotated[str, Path(min_length=1, max_length=255)]


@router.post(
    "",
    summary="Save a checkpoint (parent defaults to the thread's latest)",
    response_model=R.CheckpointOut,
)
async def save(thread_id: Thread, body: CheckpointIn, user_id: UserId, pool: Pool) -> cs.Checkpoint:
    return await cs.save(pool, user_id=user_id, thread_id=thread_id, **body.model_dump())


@router.get("/latest", summary="The thread's newest checkpoint", response_model=R.CheckpointOut)
async def latest(thread_id: Thread, user_id: UserId, pool: Pool) -> cs.Checkpoint:
    return await cs.latest(pool, user_id=user_id, thread_id=thread_id)


@router.get(
    "/{checkpoint_id}/lineage",
    summary="A checkpoint and its ancestors, newest first",
    response_model=R.LineageOut,
)
async def lineage(thread_id: Thread, checkpoint_id: str, user_id: UserId, pool: Pool) -> cs.Lineage:
    return await cs.lineage(pool, user_id=user_id, thread_id=thread_id, checkpoint_id=checkpoint_id)


@router.get("", summary="The thread's checkpoints, newest first", response_model=R.CheckpointsOut)
async def list_(
    thread_id: Thread, user_id: UserId, pool: Pool, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> cs.Checkpoints:
    return await cs.list_thread(pool, user_id=user_id, thread_id=thread_id, limit=limit)


@router.delete("", summary="Delete the thread's checkpoints", response_model=R.ThreadDeletedOut)
async def delete(thread_id: Thread, user_id: UserId, pool: Pool) -> cs.ThreadDeleted:
    return await cs.delete_thread(pool, user_id=user_id, thread_id=thread_id)
