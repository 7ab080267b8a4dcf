"""A real Redis Cluster for the tests that need one: 3 masters with a replica each,
Debian's ``redis-server`` on loopback ports (``engram_cli/cluster.py``, what
``engram run --cluster`` starts), a short node timeout so a killed master's replica
takes over in a couple of seconds. Started once per worker that runs these tests."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from engram_cli.cluster import EmbeddedRedisCluster, free_cluster_ports
from shared.settings import CommonSettings

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
