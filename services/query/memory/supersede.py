"""Adapter: when the embedder reports a memory's vector ready, merge it if it is a
duplicate (:mod:`shared.memory.dedupe`), else run the supersession check."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from shared.events import MemoryChanged, memory_adapter
from shared.memory.dedupe import SameFact, merge_duplicate
from shared.memory.supersession import check_supersession, worth_checking
from shared.runtime import Runtime
from shared.stream_registry import MEMORIES, SUPERSESSION
from shared.streams import FailurePolicy


async def supersede_embedded(
    pool: asyncpg.Pool, events: Sequence[MemoryChanged], *, same: SameFact | None = None
) -> list[MemoryChanged]:
    """Use case: for each ``embedded`` memory, merge it with the live memory it repeats
    (the newer of the two leaves retrieval), else supersede what it conflicts with
    (idempotent: a redelivered event finds nothing left to mark); return the
    ``superseded`` changes to announce. ``same`` is the model's check of Nous's
    0.80-0.90 band (None: the offline rule)."""
    ready: dict[uuid.UUID, str] = {}
    for event in events:
        if event.change == "embedded":
            ready[event.memory_id] = event.user_id
    changed: list[MemoryChanged] = []
    if ready:
        async with pool.acquire() as conn:
            kept: list[uuid.UUID] = []
            for memory_id, user_id in ready.items():
                merged = await merge_duplicate(conn, memory_id, actor="dedupe", same=same)
                if merged is None:
                    kept.append(memory_id)
                    continue
                changed.append(
                    MemoryChanged(memory_id=merged.merged, user_id=user_id, change="superseded")
                )
                if merged.merged != memory_id:
                    kept.append(memory_id)
            for memory_id in await worth_checking(conn, kept):
                user_id = ready[memory_id]
                for old in await check_supersession(conn, memory_id, actor="supersession"):
                    changed.append(
                        MemoryChanged(memory_id=old, user_id=user_id, change="superseded")
                    )
    return changed


async def on_memories_changed(
    rt: Runtime, batch: Sequence[MemoryChanged], same: SameFact | None = None
) -> None:
    """Adapter: the use case, then publish what it merged or superseded (nothing is refused)."""
    changed = await supersede_embedded(rt.pool, batch, same=same)
    await rt.publisher.publish(MEMORIES, changed)


def register(rt: Runtime, *, same: SameFact | None = None) -> None:
    rt.consume(
        stream=MEMORIES,
        group=SUPERSESSION,
        adapter=memory_adapter,
        handle=lambda batch: on_memories_changed(rt, batch, same),
        # PostgreSQL or Redis away: wait; anything else: dead-lettered after max_attempts.
        policy=FailurePolicy.default(rt.settings),
    )
