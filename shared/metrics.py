"""Prometheus metrics on an explicit registry per process; labels never carry user ids."""

from __future__ import annotations

from prometheus_client import (
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)


class ServiceMetrics:
    """The metrics every service exposes; services add their own on ``registry``."""

    def __init__(self, service: str, *, shards: int = 1) -> None:
        """``shards`` > 1 (``ENGRAM_STREAM_SHARDS``): the per-stream metrics carry a
        ``shard`` label too (0..shards-1, bounded by the setting); with one shard they
        are exactly as they always were."""
        self.service = service
        self.registry = CollectorRegistry()
        r = self.registry
        # process_* (CPU seconds, resident memory, open file descriptors, start time) and
        # python_info, as on the default registry
        ProcessCollector(registry=r)
        r.register(PLATFORM_COLLECTOR)
        per = ["stream", "shard"] if shards > 1 else ["stream"]
        self.events = Counter(
            "engram_events_total",
            "Stream entries handled, by outcome (ok, retry, dead)",
            [*per, "outcome"],
            registry=r,
        )
        self.handler_seconds = Histogram(
            "engram_handler_seconds",
            "Time to handle one batch of stream entries",
            per,
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.lag = Gauge(
            "engram_consumer_lag",
            "Entries in the stream not yet delivered to the group",
            per,
            registry=r,
        )
        self.pending = Gauge(
            "engram_consumer_pending",
            "Entries delivered to the group but not acknowledged",
            per,
            registry=r,
        )
        self.dead_lettered = Counter(
            "engram_dead_lettered_total",
            "Entries moved to the dead-letter stream",
            per,
            registry=r,
        )
        self.reclaimed = Counter(
            "engram_reclaimed_total",
            "Pending entries claimed from another consumer",
            per,
            registry=r,
        )
        self.outage = Gauge(
            "engram_consumer_outage",
            "1 while the consumer waits out an outage (a server it needs is unreachable)",
            per,
            registry=r,
        )
        self.failures = Counter(
            "engram_consumer_failures_total",
            "Failed handlings by kind: outage (waits), refused (counts attempts), "
            "data (dead-lettered at once)",
            [*per, "kind"],
            registry=r,
        )
        self.stream_length = Gauge(
            "engram_stream_length",
            "Entries held in the stream (only entries every group acknowledged are trimmed)",
            per,
            registry=r,
        )
        self.over_cap = Gauge(
            "engram_stream_over_cap",
            "1 while the stream holds more than ENGRAM_STREAM_MAXLEN entries that are not "
            "yet acknowledged by every group (nothing unread is trimmed: alarm)",
            per,
            registry=r,
        )
        self.consumers_removed = Counter(
            "engram_consumers_removed_total",
            "Idle consumers with nothing pending removed from their group",
            per,
            registry=r,
        )
        self.up = Gauge("engram_up", "1 while the service runs", ["service"], registry=r)
        self.up.labels(service).set(1)
