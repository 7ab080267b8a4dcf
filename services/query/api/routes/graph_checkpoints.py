"""Thread checkpoints for graph runtimes (LangGraph's checkpointer): put with an explicit
parent and namespace, pending writes, query, copy, prune, delete by content."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool
from services.query.api.deps import pool as pool_of
from services.query.api.lean import LeanRoute
from services.query.memory import graph_checkpoints as gc

router = APIRouter(tags=["checkpoints (Jarvus)"])

Id = Annotated[str, Field(min_length=1, max_length=255)]
Ns = Annotated[
    str, Field(max_length=255, description="namespace inside the thread; '' is the root")
]
Thread = Annotated[str, Path(min_length=1, max_length=255)]
CheckpointId = Annotated[str, Path(min_length=1, max_length=255)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GraphCheckpointIn(_Body):
    state: dict[str, Any]
    checkpoint_ns: Ns = ""
    parent_id: Id | None = Field(
        default=None, description="the parent checkpoint; none starts a lineage"
    )
    agent_id: Annotated[str | None, Field(max_length=255)] = None


class WriteIn(_Body):
    idx: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
    channel: Annotated[str, Field(min_length=1, max_length=255)]
    value: Any = None


class WritesIn(_Body):
    checkpoint_ns: Ns = ""
    task_id: Id
    task_path: Annotated[str, Field(max_length=1000)] = ""
    writes: Annotated[list[WriteIn], Field(max_length=1000)]
    replace: bool = Field(
        default=False, description="replace writes already stored at these idx (else kept)"
    )

    @field_validator("writes")
    @classmethod
    def _one_per_idx(cls, v: list[WriteIn]) -> list[WriteIn]:
        if len({w.idx for w in v}) != len(v):
            raise ValueError("two writes with one idx")
        return v


class CheckpointQueryIn(_Body):
    thread_id: Id | None = None
    checkpoint_ns: Ns | None = None
    checkpoint_id: Id | None = None
    contains: dict[str, Any] | None = Field(
        default=None, description="only checkpoints whose state contains this JSON"
    )
    before: Id | None = Field(default=None, description="only checkpoints older than this one")
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    writes: bool = Field(default=False, description="include each checkpoint's pending writes")


class CheckpointDeleteIn(_Body):
    contains_any: Annotated[list[dict[str, Any]], Field(max_length=1000)] = Field(
        description="delete the checkpoints whose state contains any of these"
    )


class PruneIn(_Body):
    thread_ids: Annotated[list[Id], Field(max_length=1000)]
    keep: Literal["latest", "none"] = Field(
        default="latest", description="latest: the newest checkpoint of each namespace"
    )


class CopyIn(_Body):
    to_thread_id: Id


# The use cases' results (services.query.memory.graph_checkpoints), under the API's names.


class SavedCheckpointOut(gc.SavedCheckpoint, R.Out):
    """A saved checkpoint, without the state it was sent."""


class WriteOut(gc.Write, R.Out):
    pass


class QueriedCheckpointOut(gc.QueriedCheckpoint, R.CheckpointOut):
    writes: list[WriteOut] | None = None  # type: ignore[assignment]


class QueriedOut(gc.Queried, R.Out):
    checkpoints: list[QueriedCheckpointOut]  # type: ignore[assignment]


class StoredOut(gc.WritesStored, R.Out):
    pass


class CountOut(gc.CheckpointsDeleted, R.Out):
    pass


class CopiedOut(gc.ThreadCopied, R.Out):
    pass


@router.put(
    "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}",
    summary="Save a checkpoint with exactly this parent (none: a new lineage)",
    response_model=SavedCheckpointOut,
)
async def put(
    thread_id: Thread,
    checkpoint_id: CheckpointId,
    body: GraphCheckpointIn,
    user_id: UserId,
    pool: Pool,
) -> gc.SavedCheckpoint:
    return await gc.put(
        pool,
        user_id=user_id,
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        **body.model_dump(),
    )


@router.put(
    "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}/writes",
    summary="Store a task's pending writes against a checkpoint",
    response_model=StoredOut,
)
async def put_writes(
    thread_id: Thread,
    checkpoint_id: CheckpointId,
    body: WritesIn,
    user_id: UserId,
    pool: Pool,
) -> gc.WritesStored:
    return await gc.put_writes(
        pool,
        user_id=user_id,
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        checkpoint_ns=body.checkpoint_ns,
        task_id=body.task_id,
        task_path=body.task_path,
        writes=[w.model_dump() for w in body.writes],
        replace=body.replace,
    )


@router.post(
    "/v1/threads/{thread_id}/checkpoints/copy",
    summary="Copy the thread's checkpoints and pending writes to another thread",
    response_model=CopiedOut,
)
async def copy(thread_id: Thread, body: CopyIn, user_id: UserId, pool: Pool) -> gc.ThreadCopied:
    return await gc.copy_thread(
        pool, user_id=user_id, thread_id=thread_id, to_thread_id=body.to_thread_id
    )


@router.post(
    "/v1/checkpoints/query",
    summary="The user's checkpoints that match, newest first (with their pending writes)",
    response_model=QueriedOut,
)
async def query(body: CheckpointQueryIn, user_id: UserId, pool: Pool) -> gc.Queried:
    return await gc.query(pool, user_id=user_id, **body.model_dump())


@router.post(
    "/v1/checkpoints/delete",
    summary="Delete the checkpoints whose state contains any of some JSON objects",
    response_model=CountOut,
)
async def delete(body: CheckpointDeleteIn, user_id: UserId, pool: Pool) -> gc.CheckpointsDeleted:
    return await gc.delete_matching(pool, user_id=user_id, contains_any=body.contains_any)


@router.post(
    "/v1/checkpoints/prune",
    summary="Keep only the newest checkpoint of each namespace of the threads (or none)",
    response_model=CountOut,
)
async def prune(body: PruneIn, user_id: UserId, pool: Pool) -> gc.CheckpointsDeleted:
    return await gc.prune(pool, user_id=user_id, thread_ids=body.thread_ids, keep=body.keep)


# --- LangGraph's two calls a step, without FastAPI's per-request path ---------------


async def _lean_put(
    request: Request, user_id: str, params: dict[str, str], body: GraphCheckpointIn
) -> gc.SavedCheckpoint:
    return await gc.put(
        pool_of(request),
        user_id=user_id,
        thread_id=params["thread_id"],
        checkpoint_id=params["checkpoint_id"],
        state=body.state,
        checkpoint_ns=body.checkpoint_ns,
        parent_id=body.parent_id,
        agent_id=body.agent_id,
    )


async def _lean_query(
    request: Request, user_id: str, params: dict[str, str], body: CheckpointQueryIn
) -> gc.Queried:
    return await gc.query(pool_of(request), user_id=user_id, **body.model_dump())


def lean_routes() -> list[LeanRoute]:
    """A checkpoint's put and the query ``get_tuple`` sends, answered by
    :class:`~services.query.api.lean.LeanRoutes` as the routes above answer them."""
    routes = {r.endpoint: r for r in router.routes if isinstance(r, APIRoute)}
    return [
        LeanRoute(routes[put], GraphCheckpointIn, _lean_put),
        LeanRoute(routes[query], CheckpointQueryIn, _lean_query),
    ]
