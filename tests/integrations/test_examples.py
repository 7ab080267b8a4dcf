"""examples/langgraph_agent.py as a script against a running engram: the agent stores
memories in one thread and answers from them in another; each thread's state persists."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import asyncpg

from shared.apikeys import create_key
from tests.live import LiveQuery
from tests.support import ROOT


async def test_langgraph_agent_remembers_across_threads(
    live_query: LiveQuery, pool: asyncpg.Pool
) -> None:
    _, key = await create_key(pool, user_id=f"agent-{uuid.uuid4().hex[:8]}")
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "examples.langgraph_agent"],
        cwd=ROOT,
        env={**os.environ, "ENGRAM_URL": live_query.url, "ENGRAM_KEY": key},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    replies = [line.split("agent: ", 1)[1] for line in lines if "agent: " in line]
    assert replies[0] == "I'll remember that my sister Ana lives in Porto."
    assert replies[2].startswith("You told me: I drink green tea, never coffee")
    assert "(0 earlier turns here)" in replies[2]  # a new thread, the store remembered
    assert replies[3].startswith("You told me: my sister Ana lives in Porto")
    assert "(1 earlier turns here)" in replies[3]  # the thread's own state came back
    assert lines[-1].endswith("resumed with 4 messages")
