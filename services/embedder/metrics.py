"""The embedder's own metrics, on the service's registry (labels never carry user ids)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from shared.embeddings.pipeline import Observer


class EmbedderMetrics(Observer):
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.texts = Counter(
            "engram_embed_texts_total",
            "Rows embedded, by provider and outcome (ready, error, deferred)",
            ["provider", "outcome"],
            registry=r,
        )
        self.batch_size = Histogram(
            "engram_embed_batch_size",
            "Texts per provider call",
            ["provider"],
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        )
        self.latency = Histogram(
            "engram_embed_provider_seconds",
            "Time of one provider call, by provider and result",
            ["provider", "result"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.rows_state = Gauge(
            "engram_embedding_rows",
            "Rows waiting for a vector (pending) or failed (error)",
            ["table", "state"],
            registry=r,
        )
        self.rebuilds_active = Gauge(
            "engram_embedding_rebuilds_active", "Rebuild-total runs not finished", registry=r
        )
        self.rebuild_remaining = Gauge(
            "engram_embedding_rebuild_remaining_rows",
            "Rows still pending in unfinished rebuilds",
            registry=r,
        )
        self.rebuild_total = Gauge(
            "engram_embedding_rebuild_total_rows", "Rows in unfinished rebuilds", registry=r
        )

    def provider_call(self, provider: str, size: int, seconds: float, ok: bool) -> None:
        self.batch_size.labels(provider).observe(size)
        self.latency.labels(provider, "ok" if ok else "error").observe(seconds)

    def rows(self, provider: str, outcome: str, n: int) -> None:
        if n:
            self.texts.labels(provider, outcome).inc(n)
