from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


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
