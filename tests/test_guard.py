"""The one guard of provider endpoints (shared/guard.py): a call waited for inline at
most ``inline_s``, then out of line; the endpoint gets no new call meanwhile."""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.errors import ProviderUnavailable
from shared.guard import Guards


async def test_a_call_past_its_inline_wait_goes_on_out_of_line_and_blocks_new_calls() -> None:
    guards = Guards()
    release = asyncio.Event()
    finished: list[str] = []

    async def slow() -> str:
        await release.wait()
        finished.append("slow")
        return "late"

    async def quick() -> str:
        return "now"

    started = time.perf_counter()
    with pytest.raises(ProviderUnavailable, match="out of line"):
        await guards.call_inline("http://llm", slow, deadline_s=30, inline_s=0.2)
    assert time.perf_counter() - started < 1.0
    assert guards.out_of_line("http://llm") == 1
    # the same endpoint: refused at once while that call is in flight; another: served
    with pytest.raises(ProviderUnavailable, match="still in flight"):
        await guards.call_inline("http://llm", quick, deadline_s=30, inline_s=0.2)
    assert await guards.call_inline("http://other", quick, deadline_s=30, inline_s=0.2) == "now"
    release.set()
    for _ in range(50):
        if not guards.out_of_line("http://llm"):
            break
        await asyncio.sleep(0.01)
    assert finished == ["slow"]  # it went on to its end, and the endpoint is served again
    assert await guards.call_inline("http://llm", quick, deadline_s=30, inline_s=0.2) == "now"
    assert guards.circuit("http://llm").state == "closed"


async def test_a_call_out_of_line_that_passes_its_deadline_counts_on_the_circuit() -> None:
    guards = Guards(failures_to_open=1)

    async def never() -> str:
        await asyncio.sleep(60)
        return "never"

    with pytest.raises(ProviderUnavailable):
        await guards.call_inline("http://llm", never, deadline_s=0.3, inline_s=0.1)
    await asyncio.sleep(0.4)
    assert guards.out_of_line("http://llm") == 0
    assert guards.circuit("http://llm").state == "open"
    with pytest.raises(ProviderUnavailable, match="circuit open"):
        await guards.call_inline("http://llm", never, deadline_s=0.3, inline_s=0.1)
    await guards.aclose()
