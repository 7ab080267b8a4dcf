"""The consumer plumbing on real Redis: lingering reads gather a batch."""

from __future__ import annotations

import asyncio

from shared.errors import InvalidEvent
from shared.events import BatchResult, TurnReceived, turn_adapter
from shared.runtime import Runtime
from shared.streams import Publisher
from tests.ingest.helpers import dead_entries


def _turn(i: int) -> TurnReceived:
    return TurnReceived(user_id="u", provider="p", chat_id="c", role="user", content=f"t{i}")


async def test_a_lingering_read_gathers_entries_that_arrive_within_the_window(settings, redis):
    batches: list[list[str]] = []

    async def handle(batch):
        batches.append([e.content for e in batch])

    rt = Runtime("test", settings)
    rt.consume(
        stream="turns", group="g", adapter=turn_adapter, handle=handle, batch=10, linger_ms=400
    )
    await rt.start()
    try:
        pub = Publisher(redis, settings)
        await pub.publish("turns", [_turn(0)])
        await asyncio.sleep(0.1)
        await pub.publish("turns", [_turn(1), _turn(2)])
        for _ in range(100):
            if sum(len(b) for b in batches) == 3:
                break
            await asyncio.sleep(0.05)
    finally:
        await rt.stop()
    assert batches == [["t0", "t1", "t2"]]
    assert (await redis.xpending(settings.stream("turns"), "g"))["pending"] == 0


async def test_a_batch_slower_than_the_claim_window_is_not_taken_over(settings, redis):
    """claim_idle_ms is 1 s in tests: a 2.5 s batch keeps its claim fresh, so the
    claiming reader never hands the same entries to the use case a second time."""
    assert settings.claim_idle_ms == 1000
    calls: list[list[str]] = []

    async def handle(batch):
        calls.append([e.content for e in batch])
        await asyncio.sleep(2.5)

    rt = Runtime("test", settings)
    rt.consume(stream="turns", group="g", adapter=turn_adapter, handle=handle, batch=10)
    await rt.start()
    try:
        await Publisher(redis, settings).publish("turns", [_turn(0), _turn(1)])
        for _ in range(100):
            if calls and (await redis.xpending(settings.stream("turns"), "g"))["pending"] == 0:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # a reclaim would have happened by now
    finally:
        await rt.stop()
    assert sorted(t for batch in calls for t in batch) == ["t0", "t1"]  # each exactly once
    assert (await redis.xpending(settings.stream("turns"), "g"))["pending"] == 0


async def test_the_adapter_maps_what_the_use_case_names_by_position_to_its_entries(settings, redis):
    """The use case sees events only and names them by position in what it was given;
    the adapter dead-letters the refused entries with the reason and deletes the
    dropped ones from the stream, also inside the halves of a bisected batch."""
    seen: list[list[str]] = []

    async def handle(batch):
        contents = [e.content for e in batch]
        seen.append(contents)
        if "boom" in contents:  # a refusal of the whole batch: it is bisected
            raise InvalidEvent("boom in the batch")
        return BatchResult(
            refused={i: f"no {c}" for i, c in enumerate(contents) if c.startswith("refuse")},
            dropped={i for i, c in enumerate(contents) if c.startswith("drop")},
        )

    rt = Runtime("test", settings)
    rt.consume(stream="turns", group="g", adapter=turn_adapter, handle=handle, batch=10)
    contents = ["t0", "refuse-a", "t2", "drop-a", "boom", "t5", "drop-b", "refuse-b"]
    ids = await Publisher(redis, settings).publish("turns", [_turn_text(c) for c in contents])
    await rt.start()
    try:
        for _ in range(200):
            pending = (await redis.xpending(settings.stream("turns"), "g"))["pending"]
            if seen and pending == 0:
                break
            await asyncio.sleep(0.05)
    finally:
        await rt.stop()
    assert len(seen) > 1  # bisected: positions were relative to each half
    dead = await dead_entries(redis, settings)
    by_id = {d["entry_id"]: d["error"] for d in dead}
    assert by_id == {
        ids[1]: "no refuse-a",
        ids[7]: "no refuse-b",
        ids[4]: "data refused: InvalidEvent: boom in the batch",
    }
    left = [i.decode() for i, _ in await redis.xrange(settings.stream("turns"))]
    assert ids[3] not in left and ids[6] not in left
    assert {ids[0], ids[2], ids[5]} <= set(left)
    assert (await redis.xpending(settings.stream("turns"), "g"))["pending"] == 0


def _turn_text(content: str) -> TurnReceived:
    return TurnReceived(user_id="u", provider="p", chat_id="c", role="user", content=content)
