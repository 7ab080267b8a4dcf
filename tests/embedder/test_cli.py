"""``engram embeddings backfill`` and ``rebuild`` as real commands."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import asyncpg
from pydantic import SecretStr

from services.embedder.settings import EmbedderSettings
from shared.embeddings import ProviderSettingsIn, put_provider_settings
from tests.embedder.conftest import add_memories, add_messages
from tests.embedder.scripted import ScriptedServer
from tests.support import ROOT, service_env


async def engram(settings: EmbedderSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = service_env(settings, ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_SECRET_KEY="cli-secret")
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "engram_cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_backfill_and_rebuild_commands(
    pool: asyncpg.Pool,
    make_settings: Callable[..., Any],
    server: ScriptedServer,
    user_id: str,
) -> None:
    s: EmbedderSettings = make_settings(
        EmbedderSettings, embedding_provider="none", secret_key=SecretStr("cli-secret")
    )
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="openai",
            endpoint_url=server.base_url("openai"),
            model="cli-model",
        ),
        s,
    )
    await add_messages(pool, user_id, [f"m{i}" for i in range(5)])
    await add_memories(pool, user_id, ["archived"], status="archived")

    done = await engram(s, "embeddings", "backfill", "--user", user_id, "--batch", "2")
    assert done.returncode == 0, done.stderr
    assert "6 row(s) without an embedding" in done.stdout and "ready 6" in done.stdout
    again = await engram(s, "embeddings", "backfill", "--user", user_id)
    assert again.returncode == 0 and "0 row(s) without an embedding" in again.stdout

    rebuilt = await engram(s, "embeddings", "rebuild", "--user", user_id, "--yes")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "6 row(s) to rebuild" in rebuilt.stdout and "done: 6/6 rows" in rebuilt.stdout
    assert "rebuild" in rebuilt.stderr  # the tqdm bar
    states = await pool.fetch(
        "SELECT DISTINCT embedding_state, embedding_model FROM messages WHERE user_id = $1",
        user_id,
    )
    assert [tuple(r) for r in states] == [("ready", "cli-model")]
