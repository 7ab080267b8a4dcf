from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ExtractorMetrics:
    """The extractor's own metrics (labels are outcomes, never user ids)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.episodes = Counter(
            "engram_extract_episodes_total",
            "Extract requests by outcome",
            ["outcome"],
            registry=registry,
        )
        self.facts = Counter(
            "engram_extract_facts_total",
            "Candidate facts by outcome (stored, confirmed, review, dropped, superseded)",
            ["outcome"],
            registry=registry,
        )
        self.swept = Counter(
            "engram_extract_swept_total",
            "Episodes the sweeper closed or asked to re-extract",
            ["kind"],
            registry=registry,
        )
        self.waiting = Gauge(
            "engram_extract_backlog_episodes",
            "Closed episodes waiting for extraction (closed or given late turns since)",
            registry=registry,
        )
        self.oldest_wait = Gauge(
            "engram_extract_oldest_wait_seconds",
            "How long the oldest episode waiting for extraction has waited",
            registry=registry,
        )
        self.close_to_summary = Histogram(
            "engram_extract_close_to_summary_seconds",
            "From an episode becoming due (its close, or a late turn) to its stored summary",
            registry=registry,
            buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
        )
