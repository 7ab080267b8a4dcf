import subprocess
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from engram_cli.embedded import free_port
from services.ingest.settings import IngestSettings
from tests.live import LiveQuery, live_query
from tests.support import start_service, wait_healthy

__all__ = ["live_ingest", "live_query"]


@pytest.fixture(scope="module")
async def live_ingest(live_query: LiveQuery) -> AsyncIterator[None]:
    """An ingest process on the live query service's streams: published turns get stored."""
    s = live_query.settings
    assert s.database_url is not None and s.redis_url is not None
    settings = IngestSettings(
        database_url=SecretStr(s.database_url.get_secret_value()),
        redis_url=SecretStr(s.redis_url.get_secret_value()),
        stream_prefix=s.stream_prefix,
        data_dir=s.data_dir,
        ingest_port=free_port(),
        log_level="WARNING",
    )
    proc = start_service("ingest", settings)
    try:
        await wait_healthy(settings.ingest_port, proc)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
