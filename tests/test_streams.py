"""The consumer plumbing on real Redis: lingering reads gather a batch."""

from __future__ import annotations

import asyncio
import gc
import random

from services.ingest.app import create_app
from services.ingest.settings import IngestSettings
from shared.errors import InvalidEvent
from shared.events import BatchResult, TurnReceived, turn_adapter
from shared.metrics import ServiceMetrics
from shared.runtime import Runtime
from shared.streams import Publisher, StreamConsumer
from tests.ingest.helpers import dead_entries
from tests.support import running


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


async def test_a_batch_left_pending_is_not_kept_claimed_after_its_handling_ends(
    make_settings, redis
):
    """A refused batch stays pending for another delivery: once its handling has ended,
    nothing resets its idle time any more, so a reclaim can take it over. The claim
    is kept fresh every few milliseconds here, so the end of a handling often comes
    while an XCLAIM is in flight, the moment redis-py swallows a cancellation (a keeper
    that outlived its batch held a turn pending at a live consumer forever)."""
    settings = make_settings(claim_idle_ms=15, max_attempts=1000)
    rounds = 40

    async def handle(batch):
        await asyncio.sleep(random.uniform(0.005, 0.03))
        raise RuntimeError("refused, left pending for another delivery")

    consumer = StreamConsumer(
        service="test",
        stream="turns",
        group="g",
        adapter=turn_adapter,
        handle=handle,
        redis=lambda: redis,
        settings=settings,
        metrics=ServiceMetrics("test"),
    )
    await consumer.ensure_group()
    key = settings.stream("turns")
    ids = await Publisher(redis, settings).publish("turns", [_turn(i) for i in range(rounds)])
    entries = await redis.xreadgroup("g", "c", {key: ">"}, count=rounds)
    try:
        for entry_id, fields in entries[0][1]:
            await consumer.process([(entry_id.decode(), fields)], attempts=None, owner="c")
        await asyncio.sleep(0.3)  # many claim periods: a keeper still running resets idle
        pending = await redis.xpending_range(key, "g", min="-", max="+", count=rounds)
        assert sorted(p["message_id"].decode() for p in pending) == sorted(ids)
        held = [p["message_id"] for p in pending if p["time_since_delivered"] < 200]
        assert held == [], f"{len(held)} of {rounds} entries still kept claimed"
    finally:
        # Keepers that outlived their batch would keep the test's loop from closing.
        for task in asyncio.all_tasks():
            for _ in range(1000):
                if task.done() or "_keep_claimed" not in task.get_coro().__qualname__:
                    break
                task.cancel()
                await asyncio.sleep(0.005)


async def test_what_is_published_soon_is_on_the_stream_once_the_runtime_stops(settings, redis):
    """``publish_soon`` (the add ack answers first): the runtime's one publisher flushes
    it at stop, so a clean shutdown loses none of it."""
    rt = Runtime("test", settings)
    await rt.start()
    try:
        assert rt.publisher is rt.publisher
        for i in range(20):
            rt.publisher.publish_soon([("turns", [_turn(i)])])
    finally:
        await rt.stop()
    entries = await redis.xrange(settings.stream("turns"))
    assert sorted(turn_adapter.validate_json(f[b"event"]).content for _, f in entries) == sorted(
        f"t{i}" for i in range(20)
    )


async def test_a_publish_soon_that_fails_is_logged_not_raised(settings, caplog):
    """Redis away after the answer: nothing raises into the loop; the warning says how
    many events were not published (their rows stay pending for the sweep)."""
    import redis.asyncio as aioredis

    from engram_cli.embedded import free_port

    dead = aioredis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    pub = Publisher(dead, settings)
    pub.publish_soon([("embed", [_turn(0), _turn(1)])])
    await pub.flush(timeout_s=10)
    await dead.aclose()
    assert "2 event(s) published after the answer were not" in caplog.text


async def test_a_started_service_leaves_what_it_holds_out_of_full_collections(make_settings):
    # the objects alive at start are frozen (shared/runtime.py, settle_heap): a full
    # garbage collection no longer walks them; they are collectable again after the stop
    gc.unfreeze()
    async with running(create_app(make_settings(IngestSettings))):
        assert gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0
