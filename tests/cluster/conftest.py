"""A real Redis Cluster for the tests that need one: 3 masters with a replica each,
Debian's ``redis-server`` on loopback ports (``engram_cli/cluster.py``, what
``engram run --cluster`` starts), a short node timeout so a killed master's replica
takes over in a couple of seconds. Started once per worker that runs these tests.
And a PostgreSQL primary with a streaming replica (``replicated``)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from engram_cli.cluster import EmbeddedRedisCluster, free_cluster_ports
from engram_cli.embedded import free_port
from engram_cli.replica import EmbeddedReplica
from shared.settings import CommonSettings
from tests.conftest import Infra

SHARDS = 6


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedRedisCluster]:
    root = Path(tempfile.mkdtemp(prefix="engram-cluster-"))
    cluster = EmbeddedRedisCluster(root, free_cluster_ports(6), node_timeout_ms=1000)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster_settings(
    make_settings: Callable[..., Any], redis_cluster: EmbeddedRedisCluster
) -> Callable[..., Any]:
    """``make_settings`` on the cluster: ``SHARDS`` shards per stream, a test's own prefix."""
    prefix = f"c{uuid.uuid4().hex[:8]}:"

    def make(cls: type[CommonSettings] = CommonSettings, **overrides: Any) -> Any:
        values: dict[str, Any] = {
            "redis_url": SecretStr(redis_cluster.url),
            "redis_cluster": True,
            "stream_shards": SHARDS,
            "stream_prefix": prefix,
        }
        values.update(overrides)
        return make_settings(cls, **values)

    return make


@dataclass
class Replicated:
    """A PostgreSQL primary of its own (migrated) and its streaming replica."""

    primary: EmbeddedReplica
    """a copy of the session's migrated database, a primary of its own"""
    replica: EmbeddedReplica
    database_url: str
    read_url: str


@pytest.fixture(scope="session")
def replicated(infra: Infra) -> Iterator[Replicated]:
    """A primary with one streaming replica, from the embedded PostgreSQL's binaries
    (``engram_cli/replica.py``, what ``engram run --cluster`` starts). The primary is a
    copy of the session's migrated database (``pg_basebackup``, seconds; migrating a
    new one takes tens), not the session's own: the tests restart it."""
    session_pg = infra.data_dir / "pg"
    if not (session_pg / "PG_VERSION").exists():
        pytest.fail("the replica tests copy the session's embedded PostgreSQL (no test URL)")
    root = Path(tempfile.mkdtemp(prefix="engram-replica-"))
    primary = EmbeddedReplica(session_pg, root / "primary", free_port(), standby=False)
    replica = EmbeddedReplica(primary.data_dir, root / "replica", free_port())
    try:
        url = primary.start()
        yield Replicated(primary, replica, url, replica.start())
    finally:
        replica.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)
