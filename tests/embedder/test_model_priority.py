"""The embedder's model passes at a lower CPU priority, on threads of their own.

Linux schedules threads: a pass's thread is put at SCHED_IDLE (or nice 19) once,
and nothing else of the process (the event loop, asyncio's default pool, the
query service's passes) is lowered with it (docs/embeddings.md).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from shared.embeddings import local

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling")


def where() -> tuple[int, int, str]:
    """The calling thread's scheduling policy, nice value and name."""
    native = threading.get_native_id()
    return (
        os.sched_getscheduler(0),
        os.getpriority(os.PRIO_PROCESS, native),
        (threading.current_thread().name),
    )


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int, str]]]:
    """Where each pass ran; the model itself is not loaded."""
    found: list[tuple[int, int, str]] = []

    def encode(texts: Sequence[str], *, batch_size: int, model: str) -> list[list[float]]:
        found.append(where())
        return [[float(len(t))] for t in texts]

    monkeypatch.setattr(local, "encode", encode)
    yield found
    local.configure(workers=1, threads=0)


async def embed_twice() -> list[list[float]]:
    embedder = local.LocalEmbedder(model=local.INT8_MODEL)
    first, second = await asyncio.gather(embedder.embed(["a"]), embedder.embed(["bb", "ccc"]))
    return first + second


async def test_idle_passes_run_at_sched_idle_and_nothing_else_does(
    seen: list[tuple[int, int, str]],
) -> None:
    local.configure(workers=2, threads=1, priority="idle")
    assert await embed_twice() == [[1.0], [2.0], [3.0]]
    assert len(seen) == 2
    for policy, _, name in seen:
        assert policy == os.SCHED_IDLE
        assert name.startswith("model-pass")
    # the event loop's thread and asyncio's own pool keep the normal policy
    assert where()[0] == os.SCHED_OTHER
    assert (await asyncio.to_thread(where))[0] == os.SCHED_OTHER


async def test_low_passes_run_at_nice_19(seen: list[tuple[int, int, str]]) -> None:
    local.configure(workers=1, threads=1, priority="low")
    await embed_twice()
    assert {(policy, nice) for policy, nice, _ in seen} == {(os.SCHED_OTHER, 19)}
    assert where()[1] == os.getpriority(os.PRIO_PROCESS, 0)


async def test_normal_passes_run_as_before(seen: list[tuple[int, int, str]]) -> None:
    local.configure(workers=2, threads=1, priority="idle")
    local.configure(workers=2, threads=1)  # back to normal: the lowered threads are not used
    await embed_twice()
    for policy, nice, name in seen:
        assert policy == os.SCHED_OTHER
        assert nice == os.getpriority(os.PRIO_PROCESS, 0)
        assert not name.startswith("model-pass")


def test_an_unknown_priority_is_refused() -> None:
    from shared.errors import ConfigError

    with pytest.raises(ConfigError, match="priority"):
        local.configure(priority="urgent")


def test_the_embedder_lowers_its_passes_and_the_query_service_does_not(
    seen: list[tuple[int, int, str]], make_settings: Callable[..., Any]
) -> None:
    from services.embedder.app import create_app as embedder_app
    from services.embedder.settings import EmbedderSettings
    from services.query.settings import QuerySettings
    from shared.embeddings.providers import ProviderRegistry

    embedder_app(make_settings(EmbedderSettings, embed_model_priority="low"))
    assert local._priority == "low"
    ProviderRegistry.from_settings(make_settings(QuerySettings))
    assert local._priority == "normal"
