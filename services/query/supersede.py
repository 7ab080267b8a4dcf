"""Adapter: run the supersession check when the embedder reports a memory's vector ready."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from shared.events import MemoryChanged, memory_adapter
from shared.memory.supersession import check_supersession
from shared.runtime import Runtime
from shared.streams import Delivery, FailurePolicy, Rejections

GROUP = "supersession"


async def on_memories_changed(rt: Runtime, batch: Sequence[Delivery[MemoryChanged]]) -> Rejections:
    """For each ``embedded`` memory, supersede what it conflicts with (idempotent: a
    redelivered event finds nothing left to mark), then announce what was superseded."""
    ready: dict[uuid.UUID, str] = {}
    for d in batch:
        if d.event.change == "embedded":
            ready[d.event.memory_id] = d.event.user_id
    changed: list[MemoryChanged] = []
    if ready:
        async with rt.pool.acquire() as conn:
            for memory_id, user_id in ready.items():
                for old in await check_supersession(conn, memory_id, actor="supersession"):
                    changed.append(
                        MemoryChanged(memory_id=old, user_id=user_id, change="superseded")
                    )
    await rt.publisher.publish("memories", changed)
    return {}


def register(rt: Runtime) -> None:
    rt.consume(
        stream="memories",
        group=GROUP,
        adapter=memory_adapter,
        handle=lambda batch: on_memories_changed(rt, batch),
        # PostgreSQL or Redis away: wait; anything else: dead-lettered after max_attempts.
        policy=FailurePolicy.default(rt.settings),
    )
