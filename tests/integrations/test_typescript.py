"""The TypeScript client (clients/typescript) under node's own test runner, and the
TypeScript example, against a running query service."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid

import asyncpg
import pytest

from shared.apikeys import create_key
from tests.live import LiveQuery
from tests.support import ROOT

CLIENT = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="node is missing (or npm): Debian's nodejs and npm, which .ci/run installs",
)


def npm_ci() -> None:
    """The dev dependencies (openapi-typescript, typescript) from the committed lock."""
    if not (CLIENT / "node_modules" / ".bin" / "openapi-typescript").exists():
        subprocess.run(
            [str(NPM), "ci", "--prefer-offline", "--no-audit", "--no-fund"],
            cwd=CLIENT,
            check=True,
            timeout=600,
        )


async def env_for(live: LiveQuery, pool: asyncpg.Pool) -> dict[str, str]:
    _, key = await create_key(pool, user_id=f"ts-{uuid.uuid4().hex[:8]}")
    return {**os.environ, "ENGRAM_URL": live.url, "ENGRAM_KEY": key}


async def test_node_suite(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    await asyncio.to_thread(npm_ci)
    env = await env_for(live_query, pool)
    done = await asyncio.to_thread(
        subprocess.run,
        [str(NPM), "test"],
        cwd=CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(done.stdout[-3000:], done.stderr[-2000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout
    assert "# pass 11" in done.stdout


async def test_typescript_example(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    env = await env_for(live_query, pool)
    done = await asyncio.to_thread(
        subprocess.run,
        [str(NODE), str(ROOT / "examples" / "typescript" / "remember.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "found: [ 'Sam is allergic to peanuts and loves Thai food' ]" in done.stdout
    assert "lineage: book <- ask" in done.stdout
    assert "missing memory: 404" in done.stdout
