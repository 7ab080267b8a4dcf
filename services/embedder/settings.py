from __future__ import annotations

import os

from pydantic import Field

from shared.embeddings.settings import EmbeddingSettings


class EmbedderSettings(EmbeddingSettings):
    """The embedder service: batching, retries of pending rows, gauges."""

    # Throughput, not one query's latency: a forward pass per core, one thread each
    # (bench/embed: the bare model 10-24% faster than one pass on every core).
    embedding_local_workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="forward passes of the local model at once",
    )
    embedding_local_threads: int = Field(
        default=1, ge=0, description="CPU threads per forward pass; 0 = every core"
    )

    embed_batch_size: int = Field(default=64, description="texts per provider call (N)")
    embed_read_batch: int = Field(
        default=200, description="stream entries read at once; their texts are merged"
    )
    embed_linger_ms: int = Field(
        default=20, description="a read with fewer entries waits this long for more (T)"
    )
    embed_parallel: int = Field(
        default=2, description="provider calls in flight per read (overlaps model and writes)"
    )
    embed_readers: int = Field(
        default=1,
        ge=1,
        description="reads of the embed stream in flight; 2 fetches the next read's rows "
        "while the last one's texts are embedded (a bulk import: the model never waits "
        "for them), but splits live traffic into more, smaller passes (docs/embeddings.md)",
    )
    embed_max_chars: int = Field(default=8000, description="longer texts are cut")
    embed_passage_chars: int = Field(
        default=800,
        ge=0,
        description="a turn longer than this many characters is also embedded as passages "
        "of at most this many (its head stays the turn's own vector; docs/embeddings.md, "
        "Passages); 0 = never",
    )
    embed_retry_backoff_s: float = Field(
        default=5.0, description="first retry of rows whose provider was down, doubled"
    )
    embed_retry_max_s: float = Field(default=600.0, description="longest retry delay")
    embed_sweep_s: float = Field(default=2.0, description="how often due retries are looked for")
    embed_orphan_after_s: float = Field(
        default=600.0,
        gt=0,
        description="a row pending this long with no retry time and never tried has lost "
        "its request (dead-lettered, lost): the sweep embeds it; it looks for such rows "
        "every quarter of this",
    )
    vector_index_min_rows: int = Field(
        default=5000,
        description="a user with more embedded rows of a table than this gets "
        "HNSW index entries for them; fewer are searched exactly and cost no index insert",
    )
    vector_index_check_s: float = Field(
        default=5.0, description="how often users who got vectors are checked against it"
    )
    embed_gauge_s: float = Field(default=15.0, description="how often row gauges are refreshed")
