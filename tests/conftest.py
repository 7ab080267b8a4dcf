"""Fixtures: real embedded PostgreSQL (pgvector) and real Redis for the whole session.

Set ENGRAM_TEST_DATABASE_URL / ENGRAM_TEST_REDIS_URL to run against other servers
(the database must have pgvector; it is migrated). Each test gets its own stream
prefix and random user ids, so tests never see each other's data.

In parallel (``make test WORKERS=2``: pytest-xdist, ``-n 2``) each worker is a
process of its own with its own PostgreSQL, Redis and data directory (these session
fixtures run once per worker); only the int8 model's export is shared, made once under
a file lock. A module's tests stay on one worker (its module fixtures -- a query
service, Chromium, ``engram run`` -- start once), the chaos suite is one group (one
stack), and the groups that take longest are handed out first.
"""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from engram_cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from shared.db import connect, create_pool
from shared.migrate import migrate
from shared.settings import CommonSettings
from tests.support import MODELS

S = TypeVar("S", bound=CommonSettings)


@dataclass
class Infra:
    database_url: str
    redis_url: str
    data_dir: Path


_export: threading.Thread | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    """On a fresh checkout, export the int8 model in the background from the start (in
    the one process, or a parallel run's controller): the tests that load it wait on the
    export's file lock instead of paying for it inside their own timeout, and the tests
    before them run meanwhile."""
    global _export
    if os.environ.get("PYTEST_XDIST_WORKER") or session.config.option.collectonly:
        return
    try:
        from shared.embeddings import local_onnx

        if local_onnx.cached_path(MODELS).exists():
            return
    except Exception:  # no 'local' extra: the tests that need the model say so
        return

    def export() -> None:
        try:
            local_onnx.ensure_exported(MODELS)
        except Exception:  # the first test that loads the model reports it
            pass

    _export = threading.Thread(target=export, name="int8-export", daemon=True)
    _export.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _export is not None:
        _export.join()  # leave no export process behind


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    tmp = Path(tempfile.mkdtemp(prefix="engram-test-"))
    pg: EmbeddedPostgres | None = None
    rd: EmbeddedRedis | None = None
    db_url = os.environ.get("ENGRAM_TEST_DATABASE_URL")
    redis_url = os.environ.get("ENGRAM_TEST_REDIS_URL")
    if not db_url:
        pg = EmbeddedPostgres(tmp / "pg", delete_on_exit=True)
        db_url = pg.start()
    if not redis_url:
        rd = EmbeddedRedis(tmp / "redis", port=free_port())
        redis_url = rd.start(persistent=False)

    import asyncio

    async def _migrate() -> None:
        conn = await connect(db_url, codecs=False)
        try:
            await migrate(conn, embedding_dim=384)
        finally:
            await conn.close()

    asyncio.run(_migrate())
    # The int8 model's export is cached per checkout, not made anew per test session.
    MODELS.mkdir(parents=True, exist_ok=True)
    (tmp / "models").symlink_to(MODELS)
    try:
        yield Infra(database_url=db_url, redis_url=redis_url, data_dir=tmp)
    finally:
        if rd is not None:
            rd.stop()
        if pg is not None:
            pg.stop()


@pytest.fixture
def make_settings(infra: Infra) -> Callable[..., Any]:
    """Build a settings object of any service class, wired to the test servers.

    Streams get a per-test prefix; reclaim is quick so crash tests finish fast."""
    prefix = f"t{uuid.uuid4().hex[:10]}:"

    def make(cls: type[S] = CommonSettings, **overrides: Any) -> S:  # type: ignore[assignment]
        values: dict[str, Any] = {
            "database_url": SecretStr(infra.database_url),
            "redis_url": SecretStr(infra.redis_url),
            "stream_prefix": prefix,
            "data_dir": infra.data_dir,
            "claim_idle_ms": 1000,
            "consumer_block_ms": 50,
            "db_pool_max": 4,
            "query_port": free_port(),
            "ingest_port": free_port(),
            "embedder_port": free_port(),
            "extractor_port": free_port(),
            # the scripted providers listen on loopback (shared/outbound.py)
            "embedding_endpoint_allow": "127.0.0.0/8",
        }
        values.update(overrides)
        return cls(**values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., CommonSettings]) -> CommonSettings:
    return make_settings()


@pytest.fixture(scope="session")
async def pool(infra: Infra) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(infra.database_url, max_size=4)
    yield p
    await p.close()


@pytest.fixture(scope="session")
async def redis(infra: Infra) -> AsyncIterator[aioredis.Redis]:
    r = aioredis.from_url(infra.redis_url)
    yield r
    await r.aclose()


@pytest.fixture
def user_id() -> str:
    return f"user-{uuid.uuid4().hex[:12]}"


# Handed out first in a parallel run, longest first (measured with --durations on a
# fresh clone); every other module follows in collection order. The browser tests need
# no embedding model, so they run while a fresh clone's export finishes.
LONGEST_FIRST = (
    "tests/chaos/",
    "tests/cluster/",
    "tests/browser/",
    "tests/ops/",
)


def _group(nodeid: str) -> str:
    """The work unit of a test in a parallel run: the chaos suite is one (one stack),
    else its module (its module fixtures start once)."""
    path = nodeid.split("::", 1)[0]
    return "chaos" if path.startswith("tests/chaos/") else path


def _rank(nodeid: str) -> int:
    return next(
        (i for i, prefix in enumerate(LONGEST_FIRST) if nodeid.startswith(prefix)),
        len(LONGEST_FIRST),
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the units are handed out in
        items.sort(key=lambda item: _rank(item.nodeid))  # stable: modules keep theirs


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` (pyproject's addopts) with our units: xdist's ``loadgroup``
    cannot regroup tests under pytest 9 (it rewrites a node id pytest no longer reads)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return Units(config, log)


MISSING_TOOL_WORDS = ("chromium is missing", "prometheus is missing", "node is missing")

# The reliability table of tests/chaos: rows from the tests' reports, which reach this
# process from a parallel run's workers too (tests/chaos/conftest.py attaches them).
RELIABILITY_PROPERTY = "reliability"
RELIABILITY: dict[str, tuple[str, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, rows in report.user_properties:
        if name == RELIABILITY_PROPERTY:
            RELIABILITY.update({check: (value, note) for check, value, note in rows})


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The reliability table, if the chaos suite ran; and say loudly when tests were
    skipped because a Debian package is missing (they are part of the suite: `.ci/run`
    installs chromium and prometheus)."""
    if RELIABILITY:
        terminalreporter.section("reliability (tests/chaos)")
        width = max(len(k) for k in RELIABILITY)
        for check, (value, note) in RELIABILITY.items():
            terminalreporter.write_line(f"{check:<{width}}  {value:>10}  {note}")
    skipped = terminalreporter.stats.get("skipped", [])
    missing = [
        r
        for r in skipped
        if any(word in str(getattr(r, "longrepr", "")).lower() for word in MISSING_TOOL_WORDS)
    ]
    if missing:
        terminalreporter.write_sep(
            "!", f"{len(missing)} TESTS SKIPPED: A TOOL IS MISSING", red=True
        )
        terminalreporter.write_line(
            "install Debian's chromium, prometheus, nodejs and npm (apt-get install chromium "
            "prometheus nodejs npm; .ci/run does) to run the browser, Prometheus and "
            "TypeScript tests",
            red=True,
        )
