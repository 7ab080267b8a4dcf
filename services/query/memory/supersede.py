"""Adapter: run the supersession check when the embedder reports a memory's vector ready."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from shared.events import MemoryChanged, memory_adapter
from shared.memory.supersession import check_supersession, worth_checking
from shared.runtime import Runtime
from shared.stream_registry import MEMORIES, SUPERSESSION
from shared.streams import FailurePolicy


async def supersede_embedded(
    pool: asyncpg.Pool, events: Sequence[MemoryChanged]
) -> list[MemoryChanged]:
    """Use case: for each ``embedded`` memory, supersede what it conflicts with
    (idempotent: a redelivered event finds nothing left to mark); return the
    ``superseded`` changes to announce."""
    ready: dict[uuid.UUID, str] = {}
    for event in events:
        if event.change == "embedded":
            ready[event.memory_id] = event.user_id
    changed: list[MemoryChanged] = []
    if ready:
        async with pool.acquire() as conn:
            for memory_id in await worth_checking(conn, list(ready)):
                user_id = ready[memory_id]
                for old in await check_supersession(conn, memory_id, actor="supersession"):
                    changed.append(
                        MemoryChanged(memory_id=old, user_id=user_id, change="superseded")
                    )
    return changed


async def on_memories_changed(rt: Runtime, batch: Sequence[MemoryChanged]) -> None:
    """Adapter: the use case, then publish what it superseded (nothing is refused)."""
    changed = await supersede_embedded(rt.pool, batch)
    await rt.publisher.publish(MEMORIES, changed)


def register(rt: Runtime) -> None:
    rt.consume(
        stream=MEMORIES,
        group=SUPERSESSION,
        adapter=memory_adapter,
        handle=lambda batch: on_memories_changed(rt, batch),
        # PostgreSQL or Redis away: wait; anything else: dead-lettered after max_attempts.
        policy=FailurePolicy.default(rt.settings),
    )
