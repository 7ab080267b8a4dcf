"""The reliability suite (issue 17.8): marked ``chaos`` (and ``slow``, so ``make
test-fast`` leaves it out). Its default size is the short form ``.ci/run`` runs
(a few minutes); ``ENGRAM_CHAOS_SCALE=10`` runs ten times the load;
``ENGRAM_CHAOS_LOG_LEVEL=INFO`` makes the services' logs say more (kept when a test
fails).

Each test adds its rows to one table, printed at the end of the run:
lost, duplicated, leaks, 5xx, and poison throughput against clean. The rows travel
with the test's report (``user_properties``), so a parallel run's controller prints
them too (tests/conftest.py); the whole suite runs on one worker, with one stack."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RELIABILITY_PROPERTY

SCALE = max(1, int(os.environ.get("ENGRAM_CHAOS_SCALE", "1")))

# check -> (value, what it means); filled by the test running now, then handed to its
# report (the summary is printed by tests/conftest.py's pytest_terminal_summary)
TABLE: dict[str, tuple[Any, str]] = {}


def record(check: str, value: Any, note: str = "") -> None:
    TABLE[check] = (value, note)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and TABLE:
        rows = [[check, str(value), note] for check, (value, note) in TABLE.items()]
        report.user_properties.append((RELIABILITY_PROPERTY, rows))
        TABLE.clear()


@pytest.fixture(scope="session")
def embed_server() -> Any:
    """The system embedding provider of the chaos stack: a scripted OpenAI-compatible
    server over real HTTP (fast, deterministic vectors)."""
    from tests.embedder.scripted import ScriptedServer

    server = ScriptedServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest, embed_server: Any) -> Any:
    """Own PostgreSQL and Redis (restartable), the query service, and two instances of
    each consumer in the same group.

    In a directory of its own, not under pytest's: a pytest session that starts
    meanwhile makes ``/tmp/pytest-of-<user>`` private again, and PostgreSQL (run as
    its own user) could then no longer reach its data directory to restart. When a
    test failed, the services' logs (and Redis's) are kept: the path is printed."""
    from tests.chaos.stack import start_stack

    root = Path(tempfile.mkdtemp(prefix="engram-chaos-"))
    s = start_stack(
        root,
        ENGRAM_EMBEDDING_PROVIDER="openai",
        ENGRAM_EMBEDDING_URL=f"{embed_server.url}/v1",
        ENGRAM_EMBEDDING_MODEL="scripted",
        ENGRAM_STALE_AFTER_MINUTES="0.05",
        ENGRAM_SWEEP_INTERVAL_S="1",
        ENGRAM_EMBED_SWEEP_S="1",
        ENGRAM_EMBED_RETRY_BACKOFF_S="1",
        ENGRAM_EMBED_RETRY_MAX_S="5",
        ENGRAM_SECRET_KEY="chaos-secret",
        ENGRAM_LOG_LEVEL=os.environ.get("ENGRAM_CHAOS_LOG_LEVEL", "WARNING"),
    )
    try:
        s.add_all({"query": 1, "ingest": 2, "embedder": 2, "extractor": 2})
        yield s
    finally:
        s.stop()
        if request.session.testsfailed:
            kept = Path(tempfile.mkdtemp(prefix="engram-chaos-logs-"))
            for log in [*root.glob("*.log"), root / "redis" / "redis.log"]:
                if log.exists():
                    shutil.copy(log, kept / log.name)
            print(f"\nchaos: a test failed; the services' logs are kept in {kept}")
        shutil.rmtree(root, ignore_errors=True)
