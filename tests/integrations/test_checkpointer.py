"""engram_langgraph.EngramSaver against a running query service: LangGraph's own
conformance suite (langgraph-checkpoint-conformance), on the async methods and, through
a shim that runs them in a thread, on the sync ones; then a graph that resumes a thread."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport

from engram_client import AsyncEngram, BadRequest, ValidationFailed
from engram_client import _calls as c
from engram_langgraph import EngramSaver
from shared.apikeys import create_key
from tests.live import LiveQuery

ALL = 81  # the suite's tests: 5 base capabilities and 3 extended ones


async def user_key(pool: asyncpg.Pool, prefix: str) -> str:
    _, key = await create_key(pool, user_id=f"{prefix}-{uuid.uuid4().hex[:8]}")
    return key


class SyncDriven(EngramSaver):
    """The suite awaits the async methods; these run the sync ones in a thread instead."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self, config: RunnableConfig | None, **kw: Any
    ) -> AsyncIterator[CheckpointTuple]:
        for t in await asyncio.to_thread(lambda: list(self.list(config, **kw))):
            yield t

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


async def run_suite(saver_type: type[EngramSaver], url: str, key: str) -> CapabilityReport:
    @checkpointer_test(name=f"engram-{saver_type.__name__}")
    async def factory() -> AsyncIterator[EngramSaver]:
        saver = saver_type(url, key)
        try:
            yield saver
        finally:
            saver.close()
            await saver.aclose()

    report = await validate(factory)
    report.print_report()
    return report


def counts(report: CapabilityReport) -> tuple[int, int]:
    results = report.results.values()
    return sum(r.tests_passed for r in results), sum(r.tests_failed for r in results)


@pytest.mark.parametrize("saver_type", [EngramSaver, SyncDriven], ids=["async", "sync"])
async def test_conformance(
    live_query: LiveQuery, pool: asyncpg.Pool, saver_type: type[EngramSaver]
) -> None:
    report = await run_suite(saver_type, live_query.url, await user_key(pool, "conformance"))
    failures = [f for r in report.results.values() for f in r.failures]
    assert failures == []
    assert counts(report) == (ALL, 0)
    assert report.conformance_level() == "FULL"


async def test_bad_input_is_4xx_naming_the_field(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    async with AsyncEngram(live_query.url, await user_key(pool, "bad")) as client:
        await client.send(c.checkpoints_put("t", "a", {"s": 1}, checkpoint_ns="ns1"))
        with pytest.raises(BadRequest, match="checkpoint_ns"):
            await client.send(c.checkpoints_put("t", "a", {"s": 2}, checkpoint_ns="ns2"))
        with pytest.raises(BadRequest, match="parent_id"):
            await client.send(c.checkpoints_put("t", "b", {"s": 1}, parent_id="b"))
        twice = [{"idx": 0, "channel": "c", "value": 1}, {"idx": 0, "channel": "d", "value": 2}]
        with pytest.raises(ValidationFailed, match="writes"):
            await client.send(c.checkpoints_put_writes("t", "a", "task", twice, replace=True))
        with pytest.raises(BadRequest, match="to_thread_id"):
            await client.send(c.checkpoints_copy("t", "t"))
        with pytest.raises(ValidationFailed, match="keep"):
            await client.send(c.checkpoints_prune(["t"], keep="some"))  # type: ignore[arg-type]
