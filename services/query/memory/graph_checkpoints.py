"""Thread checkpoints as a graph runtime (LangGraph) keeps them.

Jarvus's checkpoints (:mod:`services.query.checkpoints_service`) with what a
checkpointer needs on top: a namespace inside the thread (a subgraph's own
checkpoints), an explicit parent (a checkpoint without one starts a lineage),
the pending writes of the tasks run from a checkpoint, a query over the user's
checkpoints (thread, namespace, id, a cursor, a JSON the state must contain),
copying a thread, pruning threads to their latest checkpoints, and deleting the
checkpoints whose state contains any of some JSON objects (a run's).

Checkpoint ids stay unique within a thread (the table's key); saving an id that
the thread holds in another namespace is refused. Every statement is scoped by
user.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import asyncpg
import orjson
from pydantic import BaseModel, ConfigDict

from services.query.memory.checkpoints import MAX_STEP, Checkpoint, fields
from shared.db import audit
from shared.errors import InvalidRequest
from shared.users import ENSURE_USER, ensure_user


class SavedCheckpoint(BaseModel):
    """A saved checkpoint, without the state it was sent."""

    model_config = ConfigDict(frozen=True)

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    agent_id: str | None
    step: int
    created_at: str
    """ISO 8601, as stored."""

    @classmethod
    def of(cls, r: asyncpg.Record) -> SavedCheckpoint:
        return cls(
            thread_id=r["thread_id"],
            checkpoint_ns=r["checkpoint_ns"],
            checkpoint_id=r["checkpoint_id"],
            parent_id=r["parent_id"],
            agent_id=r["agent_id"],
            step=r["step"],
            created_at=r["created_at"].isoformat(),
        )


class Write(BaseModel):
    """A pending write of a task run from a checkpoint."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    idx: int
    channel: str
    value: Any
    task_path: str


class QueriedCheckpoint(Checkpoint):
    """A checkpoint with its namespace, and its pending writes when they were asked for."""

    checkpoint_ns: str
    writes: list[Write] | None = None
    """In the order LangGraph applies them; None when not asked for."""

    @classmethod
    def of(cls, r: asyncpg.Record, *, writes: bool = False) -> QueriedCheckpoint:
        return cls(
            **fields(r),
            checkpoint_ns=r["checkpoint_ns"],
            writes=r["writes"] if writes else None,
        )


class Queried(BaseModel):
    model_config = ConfigDict(frozen=True)

    checkpoints: list[QueriedCheckpoint]
    """Newest first."""


class WritesStored(BaseModel):
    model_config = ConfigDict(frozen=True)

    stored: int
    """The writes stored (one kept as it was is not counted)."""


class CheckpointsDeleted(BaseModel):
    model_config = ConfigDict(frozen=True)

    deleted: int
    """Checkpoints deleted (their writes went with them)."""


class ThreadCopied(BaseModel):
    model_config = ConfigDict(frozen=True)

    thread_id: str
    """The thread copied to."""
    copied: int
    """Checkpoints copied (the ones the thread already held are kept)."""


_COLUMNS = "thread_id, checkpoint_ns, checkpoint_id, parent_id, agent_id, step, state, created_at"

# One statement, one round trip: the user ensured (the foreign key is checked at the
# statement's end), the checkpoint saved, its audit line written (as shared.db.audit
# writes them; the memory writer does the same in one statement).
PUT = f"""
WITH u AS (
    {ENSURE_USER}
),
c AS (
    INSERT INTO checkpoints AS c
        (user_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, agent_id, step, state)
    VALUES ($1, $2, $3, $4, $5, $6,
            coalesce((SELECT least(p.step + 1, {MAX_STEP}) FROM checkpoints p
                      WHERE p.user_id = $1 AND p.thread_id = $2 AND p.checkpoint_id = $5), 0),
            $7::text::jsonb)
    ON CONFLICT (user_id, thread_id, checkpoint_id) DO UPDATE
    SET state = EXCLUDED.state, parent_id = EXCLUDED.parent_id, agent_id = EXCLUDED.agent_id,
        step = EXCLUDED.step
    WHERE c.checkpoint_ns = EXCLUDED.checkpoint_ns
    RETURNING {_COLUMNS.replace(" state,", "")}, (xmax = 0) AS inserted
),
a AS (
    INSERT INTO audit_log (user_id, actor, action, entity, entity_id, details)
    SELECT $1, 'api', CASE WHEN c.inserted THEN 'create' ELSE 'update' END, 'checkpoint',
           $2 || '/' || $4, '{{}}'::jsonb
    FROM c
)
SELECT * FROM c
"""


def json_text(value: Any) -> str:
    """``value`` as JSON text for a ``$n::text::jsonb`` parameter: orjson, ~40x faster than
    the pool's ``json.dumps`` on a checkpoint's state (~80 us for 62 kB; PostgreSQL makes
    the same jsonb of either); ``json.dumps`` for what orjson refuses (an integer past 64
    bits). What the API takes is already checked storable (``shared.storable``)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)


# $2-$5 narrow (NULL: any); $6 is a cursor id: only checkpoints older than it; $8: with
# each checkpoint's pending writes, in the order LangGraph applies them (one round trip).
QUERY = f"""
SELECT {_COLUMNS},
       CASE WHEN $8::boolean THEN (
           SELECT coalesce(jsonb_agg(jsonb_build_object(
                      'task_id', w.task_id, 'idx', w.idx, 'channel', w.channel,
                      'value', w.value, 'task_path', w.task_path)
                  ORDER BY w.task_path, w.task_id, w.idx), '[]'::jsonb)
           FROM checkpoint_writes w
           WHERE w.user_id = $1 AND w.thread_id = c.thread_id
             AND w.checkpoint_id = c.checkpoint_id)
       END AS writes
FROM checkpoints c
WHERE user_id = $1
  AND ($2::text IS NULL OR thread_id = $2)
  AND ($3::text IS NULL OR checkpoint_ns = $3)
  AND ($4::text IS NULL OR checkpoint_id = $4)
  AND ($5::jsonb IS NULL OR state @> $5)
  AND ($6::text IS NULL OR (created_at, checkpoint_id) < (
        SELECT b.created_at, b.checkpoint_id FROM checkpoints b
        WHERE b.user_id = $1 AND b.thread_id = c.thread_id AND b.checkpoint_id = $6))
ORDER BY created_at DESC, checkpoint_id DESC
LIMIT $7
"""

_PUT_WRITE = """
INSERT INTO checkpoint_writes
    (user_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, task_path)
SELECT $1, $2, $3, $4, $5, w.idx, w.channel, w.value::jsonb, $6
FROM unnest($7::int[], $8::text[], $9::text[]) AS w (idx, channel, value)
ON CONFLICT (user_id, thread_id, checkpoint_id, checkpoint_ns, task_id, idx) DO {action}
"""
PUT_WRITES_KEEP = _PUT_WRITE.format(action="NOTHING")
PUT_WRITES_REPLACE = _PUT_WRITE.format(
    action="UPDATE SET channel = EXCLUDED.channel, value = EXCLUDED.value, "
    "task_path = EXCLUDED.task_path"
)

# The writes of checkpoints a statement deleted (``gone``) go with them.
_DROP_WRITES = """
, w AS (
    DELETE FROM checkpoint_writes x USING gone
    WHERE x.user_id = $1 AND x.thread_id = gone.thread_id
      AND x.checkpoint_id = gone.checkpoint_id
)
SELECT count(*) AS deleted FROM gone
"""

DELETE_MATCHING = (
    """
WITH gone AS (
    DELETE FROM checkpoints WHERE user_id = $1 AND state @> ANY($2::jsonb[])
    RETURNING thread_id, checkpoint_id
)"""
    + _DROP_WRITES
)

# Every checkpoint of the threads but the newest of each (thread, namespace).
PRUNE_KEEP_LATEST = (
    """
WITH ranked AS (
    SELECT thread_id, checkpoint_id, row_number() OVER (
        PARTITION BY thread_id, checkpoint_ns ORDER BY created_at DESC, checkpoint_id DESC) AS n
    FROM checkpoints WHERE user_id = $1 AND thread_id = ANY($2::text[])
), gone AS (
    DELETE FROM checkpoints c USING ranked r
    WHERE c.user_id = $1 AND c.thread_id = r.thread_id AND c.checkpoint_id = r.checkpoint_id
      AND r.n > 1
    RETURNING c.thread_id, c.checkpoint_id
)"""
    + _DROP_WRITES
)

PRUNE_ALL = (
    """
WITH gone AS (
    DELETE FROM checkpoints WHERE user_id = $1 AND thread_id = ANY($2::text[])
    RETURNING thread_id, checkpoint_id
)"""
    + _DROP_WRITES
)

# The copy keeps ids, parents, steps and times, so it lists in the source's order.
COPY_THREAD = """
WITH cp AS (
    INSERT INTO checkpoints
        (user_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, agent_id, step, state,
         created_at)
    SELECT user_id, $3, checkpoint_ns, checkpoint_id, parent_id, agent_id, step, state,
           created_at
    FROM checkpoints WHERE user_id = $1 AND thread_id = $2
    ON CONFLICT (user_id, thread_id, checkpoint_id) DO NOTHING
    RETURNING checkpoint_id
), wr AS (
    INSERT INTO checkpoint_writes
        (user_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value,
         task_path, created_at)
    SELECT user_id, $3, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, task_path,
           created_at
    FROM checkpoint_writes WHERE user_id = $1 AND thread_id = $2
    ON CONFLICT DO NOTHING
)
SELECT count(*) AS copied FROM cp
"""


async def put(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    thread_id: str,
    checkpoint_id: str,
    state: dict[str, Any],
    checkpoint_ns: str = "",
    parent_id: str | None = None,
    agent_id: str | None = None,
) -> SavedCheckpoint:
    """Save (or replace) the checkpoint with exactly this parent; none starts a lineage."""
    if parent_id == checkpoint_id:
        raise InvalidRequest("parent_id: a checkpoint cannot be its own parent")
    row = await pool.fetchrow(
        PUT, user_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, agent_id, json_text(state)
    )
    if row is None:
        raise InvalidRequest(
            f"checkpoint_ns: checkpoint {checkpoint_id!r} of thread {thread_id!r} is in "
            "another namespace"
        )
    return SavedCheckpoint.of(row)


async def put_writes(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    thread_id: str,
    checkpoint_id: str,
    checkpoint_ns: str,
    task_id: str,
    task_path: str,
    writes: list[dict[str, Any]],
    replace: bool,
) -> WritesStored:
    """Store a task's writes; an (idx) already stored is kept, or with ``replace`` replaced."""
    async with pool.acquire() as conn, conn.transaction():
        await ensure_user(conn, user_id)
        status = await conn.execute(
            PUT_WRITES_REPLACE if replace else PUT_WRITES_KEEP,
            user_id,
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            task_id,
            task_path,
            [w["idx"] for w in writes],
            [w["channel"] for w in writes],
            # as JSON text: a write's value may be JSON null, which is not SQL's NULL
            [json.dumps(w["value"]) for w in writes],
        )
    return WritesStored(stored=int(status.split()[-1]))


async def query(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    thread_id: str | None = None,
    checkpoint_ns: str | None = None,
    checkpoint_id: str | None = None,
    contains: dict[str, Any] | None = None,
    before: str | None = None,
    limit: int = 100,
    writes: bool = False,
) -> Queried:
    """The user's checkpoints that match, newest first; with ``writes``, their pending writes."""
    rows = await pool.fetch(
        QUERY,
        user_id,
        thread_id,
        checkpoint_ns,
        checkpoint_id,
        contains,
        before,
        limit,
        writes,
    )
    return Queried(checkpoints=[QueriedCheckpoint.of(r, writes=writes) for r in rows])


async def delete_matching(
    pool: asyncpg.Pool, *, user_id: str, contains_any: list[dict[str, Any]]
) -> CheckpointsDeleted:
    """Delete the checkpoints whose state contains any of the objects, and their writes."""
    async with pool.acquire() as conn, conn.transaction():
        deleted = await conn.fetchval(DELETE_MATCHING, user_id, contains_any)
        if deleted:
            await audit(
                conn,
                user_id=user_id,
                action="delete",
                entity="checkpoint",
                entity_id=None,
                actor="api",
                details={"deleted": deleted, "matching": len(contains_any)},
            )
    return CheckpointsDeleted(deleted=deleted)


async def prune(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    thread_ids: list[str],
    keep: Literal["latest", "none"],
) -> CheckpointsDeleted:
    """Delete the threads' checkpoints but the newest of each namespace (or all of them)."""
    async with pool.acquire() as conn, conn.transaction():
        deleted = await conn.fetchval(
            PRUNE_KEEP_LATEST if keep == "latest" else PRUNE_ALL, user_id, thread_ids
        )
        if deleted:
            await audit(
                conn,
                user_id=user_id,
                action="delete",
                entity="checkpoint",
                entity_id=None,
                actor="api",
                details={"deleted": deleted, "threads": len(thread_ids), "keep": keep},
            )
    return CheckpointsDeleted(deleted=deleted)


async def copy_thread(
    pool: asyncpg.Pool, *, user_id: str, thread_id: str, to_thread_id: str
) -> ThreadCopied:
    """Copy the thread's checkpoints and writes to another thread (ids already there kept)."""
    if to_thread_id == thread_id:
        raise InvalidRequest("to_thread_id: the thread itself")
    async with pool.acquire() as conn, conn.transaction():
        copied = await conn.fetchval(COPY_THREAD, user_id, thread_id, to_thread_id)
        if copied:
            await audit(
                conn,
                user_id=user_id,
                action="create",
                entity="checkpoint",
                entity_id=to_thread_id,
                actor="api",
                details={"copied": copied, "from": thread_id},
            )
    return ThreadCopied(thread_id=to_thread_id, copied=copied)
