"""Settings shared by every service, read from ``ENGRAM_*`` environment variables.

Each service builds one settings object at start-up and passes it down; nothing
else reads the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def _pg_size(mb: int) -> str:
    """``mb`` as PostgreSQL shows it (whole GB from 1GB), so an unchanged value never
    looks changed (which would restart the server)."""
    return f"{mb // 1024}GB" if mb >= 1024 else f"{mb}MB"


def quarter_of_ram_mb() -> int:
    """A quarter of physical memory (PostgreSQL's advice for a server of its own),
    128MB to 8GB."""
    try:
        ram_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (AttributeError, ValueError, OSError):
        return 1024
    return max(128, min(8192, ram_mb // 4))


def default_shared_buffers() -> str:
    """A quarter of physical memory, as PostgreSQL shows it (a server of its own)."""
    return _pg_size(quarter_of_ram_mb())


def shared_buffers_for(database_bytes: int) -> str:
    """Buffers sized to the data: the next power of two above 1.5x the database on
    disk, 128MB to a quarter of RAM. 5GB of buffers on a 24 GB machine cost some 100 MB
    of resident memory before holding a row (the buffer descriptors and their table);
    the value only moves when the data crosses a power of two (a restart then)."""
    cap = quarter_of_ram_mb()
    mb = 128
    while mb < cap and mb * 2**20 < database_bytes * 3 // 2:
        mb *= 2
    return _pg_size(min(mb, cap))


class CommonSettings(BaseSettings):
    """What every engram process needs to know."""

    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_", env_file=".env", extra="ignore", populate_by_name=True
    )

    database_url: SecretStr | None = Field(
        default=None, description="PostgreSQL URL; unset = embedded PostgreSQL under data_dir"
    )
    database_read_url: SecretStr | None = Field(
        default=None,
        description="a streaming replica of ENGRAM_DATABASE_URL for the query service's reads "
        "(search, context, recall, listings); writes always go to the primary, and a user's "
        "read waits for the replica to replay that user's last write (docs/scale.md); "
        "unset = every read on the primary",
    )
    read_your_writes_wait_ms: int = Field(
        default=250,
        ge=0,
        description="how long a read waits for the replica to replay the user's last write "
        "before it reads the primary instead",
    )
    redis_url: SecretStr | None = Field(
        default=None, description="Redis URL; unset = embedded Redis under data_dir"
    )
    data_dir: Path = Field(default=Path(".engram"), description="where embedded servers keep data")
    stream_prefix: str = Field(default="engram:", description="prefix of every Redis stream")
    stream_maxlen: int = Field(
        default=1_000_000,
        description="a stream longer than this is trimmed of the entries every group has "
        "acknowledged (never of unread ones: engram_stream_over_cap alarms instead); "
        "the dead-letter stream keeps about this many newest entries",
    )
    stream_shards: int = Field(
        default=1,
        ge=1,
        le=64,
        description="shard streams per logical stream (shared/stream_registry.py): 1 = one "
        "key per stream, as on one Redis; N > 1 = keys {prefix}{name}:{k} (k = 0..N-1, a "
        "Redis Cluster hash tag), the shard chosen from the chat or user. Every producer "
        "and consumer of a deployment must agree on it",
    )
    redis_cluster: bool = Field(
        default=False,
        description="ENGRAM_REDIS_URL names a node of a Redis Cluster (redis-py RedisCluster)",
    )
    stream_wait_replicas: int = Field(
        default=0,
        ge=0,
        description="producers wait (Redis WAIT) until this many replicas hold what they "
        "published before a publish returns; 0 = do not wait (a failover can lose the "
        "newest entries: docs/scale.md)",
    )
    stream_wait_timeout_ms: int = Field(
        default=1000,
        ge=1,
        description="how long a publish waits for stream_wait_replicas; fewer replicas by "
        "then = the publish fails (InfrastructureError) and the producer retries it",
    )
    embedding_dim: int = Field(default=384, description="dimension of the vector columns")
    embedded_pg_shared_buffers: str | None = Field(
        default=None,
        description="shared_buffers of the embedded PostgreSQL; unset = sized to the data "
        "at each start (the next power of two above 1.5x the database on disk, 128MB to a "
        "quarter of the machine's memory: hot rows and the vector index in memory)",
    )
    embedded_redis_port: int = Field(
        default=6390,
        description="port of the embedded Redis that `engram run` starts (fixed, so platforms "
        "can XADD to it; the machine's own Redis usually has 6379)",
    )
    traces_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("ENGRAM_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="base URL of an OpenTelemetry collector's OTLP/HTTP receiver (e.g. "
        "http://localhost:4318; spans go to {it}/v1/traces, protobuf): set = tracing on "
        "(docs/traces.md). ENGRAM_TRACES_ENDPOINT, else the standard "
        "OTEL_EXPORTER_OTLP_ENDPOINT; unset = off, at no cost",
    )
    traces_sample_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="share of new traces recorded (a trace continued from an event or a "
        "request follows its parent's decision)",
    )
    log_level: str = "INFO"
    db_pool_min: int = 1
    db_pool_max: int = 10
    # consumer plumbing
    consumer_batch: int = Field(default=500, description="entries read per XREADGROUP")
    consumer_block_ms: int = Field(default=200, description="how long a read blocks")
    claim_idle_ms: int = Field(default=30_000, description="pending this long = reclaimable")
    max_attempts: int = Field(
        default=5,
        description="deliveries of an entry that keeps being refused (not an outage) "
        "before it is dead-lettered",
    )
    reclaim_batch: int = Field(
        default=200, description="idle pending entries taken over (XAUTOCLAIM) at once"
    )
    consumer_forget_ms: int = Field(
        default=600_000,
        description="a consumer idle this long with nothing pending is removed from its group",
    )
    consumer_name: str | None = Field(
        default=None, description="unique per process; default host-pid"
    )
    stale_window_minutes: float = Field(
        default=30.0,
        description="a chat idle this long has ended its episode: ingest opens a new one for "
        "the next turn, and the extractor's sweeper closes and extracts the open one",
    )
    host: str = "127.0.0.1"
    query_port: int = Field(default=8000, description="the agent API, docs and browser")
    ingest_port: int = Field(default=8101, description="ingest's /health and /metrics")
    embedder_port: int = Field(default=8102, description="embedder's /health and /metrics")
    extractor_port: int = Field(default=8103, description="extractor's /health and /metrics")

    def require_database_url(self) -> str:
        if self.database_url is None:
            from shared.errors import ConfigError

            raise ConfigError("ENGRAM_DATABASE_URL is not set and no embedded database was started")
        return self.database_url.get_secret_value()

    def require_redis_url(self) -> str:
        if self.redis_url is None:
            from shared.errors import ConfigError

            raise ConfigError("ENGRAM_REDIS_URL is not set and no embedded Redis was started")
        return self.redis_url.get_secret_value()

    def stream(self, name: str) -> str:
        """The full Redis key of a logical stream (``turns`` → ``engram:turns``)."""
        return f"{self.stream_prefix}{name}"
