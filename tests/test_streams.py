"""The consumer plumbing on real Redis: lingering reads gather a batch."""

from __future__ import annotations

import asyncio

from shared.events import TurnReceived, turn_adapter
from shared.runtime import Runtime
from shared.streams import Publisher


def _turn(i: int) -> TurnReceived:
    return TurnReceived(user_id="u", provider="p", chat_id="c", role="user", content=f"t{i}")


async def test_a_lingering_read_gathers_entries_that_arrive_within_the_window(settings, redis):
    batches: list[list[str]] = []

    async def handle(batch):
        batches.append([d.event.content for d in batch])

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
        calls.append([d.event.content for d in batch])
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


async def test_the_publisher_deletes_named_entries_of_a_stream_and_no_others(settings, redis):
    pub = Publisher(redis, settings)
    ids = await pub.publish("turns", [_turn(0), _turn(1), _turn(2)])
    assert await pub.delete("turns", [ids[0], ids[2], "1-1"]) == 2
    assert await pub.delete("turns", []) == 0
    left = await redis.xrange(settings.stream("turns"))
    assert [e[0].decode() for e in left] == [ids[1]]
