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

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        r = self.registry
        # process_* (CPU seconds, resident memory, open file descriptors, start time) and
        # python_info, as on the default registry
        ProcessCollector(registry=r)
        r.register(PLATFORM_COLLECTOR)
        self.events = Counter(
            "engram_events_total",
            "Stream entries handled, by outcome (ok, retry, dead)",
            ["stream", "outcome"],
            registry=r,
        )
        self.handler_seconds = Histogram(
            "engram_handler_seconds",
            "Time to handle one batch of stream entries",
            ["stream"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.lag = Gauge(
            "engram_consumer_lag",
            "Entries in the stream not yet delivered to the group",
            ["stream"],
            registry=r,
        )
        self.pending = Gauge(
            "engram_consumer_pending",
            "Entries delivered to the group but not acknowledged",
            ["stream"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "engram_dead_lettered_total",
            "Entries moved to the dead-letter stream",
            ["stream"],
            registry=r,
        )
        self.reclaimed = Counter(
            "engram_reclaimed_total",
            "Pending entries claimed from another consumer",
            ["stream"],
            registry=r,
        )
        self.up = Gauge("engram_up", "1 while the service runs", ["service"], registry=r)
        self.up.labels(service).set(1)
