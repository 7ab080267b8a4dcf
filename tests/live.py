"""A running query service (a real process on a free port) for tests that talk to it
as an outside program would: the Python client, MCP clients. Full-text only (no
system embedding provider), so no model loads."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from pydantic import SecretStr

from engram_cli.embedded import free_port
from services.query.settings import QuerySettings
from tests.conftest import Infra
from tests.support import start_service, wait_healthy

ENV = {"ENGRAM_EMBEDDING_PROVIDER": "none", "ENGRAM_EMBEDDING_RETRIES": "0"}


@dataclass
class LiveQuery:
    url: str
    settings: QuerySettings
    env: dict[str, str]


@pytest.fixture(scope="module")
async def live_query(infra: Infra) -> AsyncIterator[LiveQuery]:
    port = free_port()
    settings = QuerySettings(
        database_url=SecretStr(infra.database_url),
        redis_url=SecretStr(infra.redis_url),
        stream_prefix=f"l{uuid.uuid4().hex[:8]}:",
        data_dir=infra.data_dir,
        query_port=port,
        log_level="WARNING",
    )
    proc = start_service("query", settings, **ENV)
    try:
        await wait_healthy(port, proc)
        yield LiveQuery(f"http://127.0.0.1:{port}", settings, ENV)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
