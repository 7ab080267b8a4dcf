"""What the query service's adapters share, built once at start-up.

``create_app`` builds it and stores it on ``app.state.query``: the settings (the
one way routes reach them), the embedder resolver, the search and decision
metrics, the decision rewriter (the language model's, when one is configured)
and whether pg_trgm is installed (read when the service starts). Every memory
search goes through ``services.query.memory.search.memory_search`` with it, so the
surfaces behave (and are counted) the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from prometheus_client import CollectorRegistry, Counter

from services.query.embeddings.query import Resolver, user_query_vector
from services.query.memory.decisions import DecisionMetrics, Rewrite
from services.query.ranking.fusion import MESSAGE_MODES
from services.query.settings import QuerySettings
from shared.embeddings.user_settings import Stored


@dataclass
class QueryState:
    settings: QuerySettings
    resolver: Resolver
    searches: Counter
    message_searches: Counter
    decision_metrics: DecisionMetrics
    rewrite: Rewrite | None = None
    """The model's decision rewriter, or None without a language model."""
    trigram: bool = False
    """pg_trgm is installed (facts search); read once when the service starts."""

    @classmethod
    def build(
        cls,
        settings: QuerySettings,
        resolver: Resolver,
        registry: CollectorRegistry,
        *,
        rewrite: Rewrite | None = None,
    ) -> QueryState:
        searches = Counter(
            "engram_searches_total",
            "Memory searches by mode (hybrid, fts_only, semantic_only, match_all)",
            ["mode"],
            registry=registry,
        )
        for mode in ("hybrid", "fts_only", "semantic_only", "match_all"):
            searches.labels(mode)
        message_searches = Counter(
            "engram_message_searches_total",
            "Conversation-turn searches by the mode that ran (rrf, hybrid, fts, semantic)",
            ["mode"],
            registry=registry,
        )
        for mode in MESSAGE_MODES:
            message_searches.labels(mode)
        return cls(
            settings=settings,
            resolver=resolver,
            searches=searches,
            message_searches=message_searches,
            decision_metrics=DecisionMetrics(registry),
            rewrite=rewrite,
        )

    async def query_vector(
        self, pool: asyncpg.Pool, *, user_id: str, text: str, stored: Stored | None = None
    ) -> list[float] | None:
        return await user_query_vector(
            self.resolver, pool, user_id=user_id, settings=self.settings, text=text, stored=stored
        )
