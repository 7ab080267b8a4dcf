"""Jarvus's short-term thread checkpoints: save, latest, lineage by parent.

A checkpoint without an explicit parent follows the thread's latest one, and
its step is the parent's plus one. Saving the same checkpoint id again
replaces its state (idempotent retries). Every statement is scoped by user.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict

from shared.db import audit
from shared.errors import InvalidRequest, NotFound
from shared.users import ensure_user


class Checkpoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    agent_id: str | None
    step: int | None
    state: Any
    created_at: str
    """ISO 8601, as stored."""

    @classmethod
    def of(cls, r: asyncpg.Record) -> Checkpoint:
        return cls(**fields(r))


def fields(r: asyncpg.Record) -> dict[str, Any]:
    """A stored checkpoint's row as :class:`Checkpoint`'s fields (every kind of it)."""
    return {
        "thread_id": r["thread_id"],
        "checkpoint_id": r["checkpoint_id"],
        "parent_id": r["parent_id"],
        "agent_id": r["agent_id"],
        "step": r["step"],
        "state": r["state"],
        "created_at": r["created_at"].isoformat(),
    }


class Lineage(BaseModel):
    model_config = ConfigDict(frozen=True)

    lineage: list[Checkpoint]
    """The checkpoint, its parent, its parent's parent ... up to the root."""


class Checkpoints(BaseModel):
    model_config = ConfigDict(frozen=True)

    checkpoints: list[Checkpoint]
    """Newest first."""


class ThreadDeleted(BaseModel):
    model_config = ConfigDict(frozen=True)

    thread_id: str
    deleted: int


MAX_STEP = 2**31 - 1
"""The highest checkpoint step (the column is a PostgreSQL integer)."""

_COLUMNS = "thread_id, checkpoint_id, parent_id, agent_id, step, state, created_at"

LATEST = f"""
SELECT {_COLUMNS} FROM checkpoints
WHERE user_id = $1 AND thread_id = $2
ORDER BY created_at DESC, step DESC LIMIT 1
"""

ONE = f"""
SELECT {_COLUMNS} FROM checkpoints
WHERE user_id = $1 AND thread_id = $2 AND checkpoint_id = $3
"""

SAVE = f"""
INSERT INTO checkpoints (user_id, thread_id, checkpoint_id, parent_id, agent_id, step, state)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (user_id, thread_id, checkpoint_id) DO UPDATE
SET state = EXCLUDED.state, agent_id = EXCLUDED.agent_id, step = EXCLUDED.step
RETURNING {_COLUMNS}, (xmax = 0) AS inserted
"""

LINEAGE = f"""
WITH RECURSIVE chain AS (
    SELECT {_COLUMNS}, 0 AS depth FROM checkpoints
    WHERE user_id = $1 AND thread_id = $2 AND checkpoint_id = $3
    UNION ALL
    SELECT c.thread_id, c.checkpoint_id, c.parent_id, c.agent_id, c.step, c.state,
           c.created_at, chain.depth + 1
    FROM checkpoints c JOIN chain ON c.checkpoint_id = chain.parent_id
    WHERE c.user_id = $1 AND c.thread_id = $2 AND chain.depth < 10000
)
SELECT {_COLUMNS} FROM chain ORDER BY depth
"""

LIST = f"""
SELECT {_COLUMNS} FROM checkpoints WHERE user_id = $1 AND thread_id = $2
ORDER BY created_at DESC, step DESC LIMIT $3
"""

DELETE_THREAD = "DELETE FROM checkpoints WHERE user_id = $1 AND thread_id = $2"
DELETE_THREAD_WRITES = "DELETE FROM checkpoint_writes WHERE user_id = $1 AND thread_id = $2"


async def save(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    thread_id: str,
    state: dict[str, Any],
    checkpoint_id: str | None = None,
    parent_id: str | None = None,
    agent_id: str | None = None,
    step: int | None = None,
) -> Checkpoint:
    """Save ``state`` as a checkpoint of the thread; the parent defaults to its latest."""
    wanted_parent, wanted_id, wanted_step = parent_id, checkpoint_id, step
    async with pool.acquire() as conn, conn.transaction():
        await ensure_user(conn, user_id)
        if wanted_parent is not None:
            parent = await conn.fetchrow(ONE, user_id, thread_id, wanted_parent)
            if parent is None:
                raise InvalidRequest(
                    f"parent checkpoint {wanted_parent!r} does not exist in thread {thread_id!r}"
                )
        else:
            parent = await conn.fetchrow(LATEST, user_id, thread_id)
        checkpoint_id = wanted_id or uuid.uuid4().hex
        parent_id = parent["checkpoint_id"] if parent is not None else None
        if parent_id == checkpoint_id:
            parent_id = parent["parent_id"] if parent is not None else None
        step = (
            wanted_step
            if wanted_step is not None
            else (parent["step"] + 1 if parent is not None else 0)
        )
        if step > MAX_STEP:  # the parent is at the column's limit (an integer)
            raise InvalidRequest(
                f"step: the parent checkpoint is at step {MAX_STEP}, the highest there is; "
                "give this checkpoint a step"
            )
        row = await conn.fetchrow(
            SAVE, user_id, thread_id, checkpoint_id, parent_id, agent_id, step, state
        )
        assert row is not None
        await audit(
            conn,
            user_id=user_id,
            action="create" if row["inserted"] else "update",
            entity="checkpoint",
            entity_id=f"{thread_id}/{checkpoint_id}",
            actor="api",
        )
    return Checkpoint.of(row)


async def latest(pool: asyncpg.Pool, *, user_id: str, thread_id: str) -> Checkpoint:
    row = await pool.fetchrow(LATEST, user_id, thread_id)
    if row is None:
        raise NotFound(f"thread {thread_id!r} has no checkpoint")
    return Checkpoint.of(row)


async def lineage(
    pool: asyncpg.Pool, *, user_id: str, thread_id: str, checkpoint_id: str
) -> Lineage:
    """The checkpoint, its parent, its parent's parent ... up to the root."""
    rows = await pool.fetch(LINEAGE, user_id, thread_id, checkpoint_id)
    if not rows:
        raise NotFound(f"no checkpoint {checkpoint_id!r} in thread {thread_id!r}")
    return Lineage(lineage=[Checkpoint.of(r) for r in rows])


async def list_thread(
    pool: asyncpg.Pool, *, user_id: str, thread_id: str, limit: int
) -> Checkpoints:
    rows = await pool.fetch(LIST, user_id, thread_id, limit)
    return Checkpoints(checkpoints=[Checkpoint.of(r) for r in rows])


async def delete_thread(pool: asyncpg.Pool, *, user_id: str, thread_id: str) -> ThreadDeleted:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(DELETE_THREAD_WRITES, user_id, thread_id)  # graph_checkpoints
        status = await conn.execute(DELETE_THREAD, user_id, thread_id)
        deleted = int(status.split()[-1])
        if deleted == 0:
            raise NotFound(f"thread {thread_id!r} has no checkpoint")
        await audit(
            conn,
            user_id=user_id,
            action="delete",
            entity="checkpoint",
            entity_id=thread_id,
            actor="api",
            details={"deleted": deleted},
        )
    return ThreadDeleted(thread_id=thread_id, deleted=deleted)
