from __future__ import annotations

from pydantic import Field

from shared.embeddings import EmbeddingSettings
from shared.llm.settings import LLMSettings


class QuerySettings(LLMSettings, EmbeddingSettings):
    """Settings of the agent API (a language model is optional: decision rewrites)."""

    # One query at a time, one thread: a 6-20 word query is too short for a second thread
    # to pay for its hand-offs (int8, 300 LoCoMo questions alternated at load 7: 1.1-1.7
    # against 1.5-2.0 ms of CPU a query, p50 1.2-2.0 against 1.6-5.2 ms; a 113-token text
    # 7% less CPU, the same latency).
    embedding_local_threads: int = Field(
        default=1, ge=0, description="CPU threads per forward pass; 0 = every core"
    )
    warm_up: bool = Field(
        default=True,
        description="load the default embedding model at start-up, so the first search does "
        "not wait for it (/health answers once it is loaded)",
    )
    cookie_secure: bool = Field(
        default=False,
        description="mark the browser's session cookie Secure (set true behind HTTPS)",
    )
    ui_session_hours: float = Field(
        default=12.0,
        gt=0,
        le=24 * 30,
        description="a browser login lasts this long (a signed session, not the key)",
    )
    key_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        description="how long a query process keeps an API key it looked up (0: not kept); "
        "a revoked key is forgotten at once (PostgreSQL notifies every process), this bounds "
        "what cannot notify (a key revoked by hand in SQL)",
    )
    max_request_bytes: int = Field(
        default=1_000_000,
        ge=1_000,
        description="largest request body the API accepts (bytes); larger ones get 413",
    )
    max_import_bytes: int = Field(
        default=256_000_000,
        ge=1_000,
        description="largest archive POST /v1/me/import accepts (bytes); larger ones get 413 "
        "(engram import on the command line has no limit)",
    )
    webhook_endpoint_allow: str = Field(
        default="",
        description="what webhook URLs may point at beyond public addresses: networks, host "
        "names, or * (the same rule and syntax as ENGRAM_EMBEDDING_ENDPOINT_ALLOW)",
    )
    webhook_poll_ms: int = Field(
        default=200, ge=10, description="how often the sender looks for due deliveries"
    )
    webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="a receiver's time to answer one delivery"
    )
    webhook_max_attempts: int = Field(
        default=12, ge=1, description="attempts before a delivery is dead (replayable)"
    )
    webhook_backoff_s: float = Field(
        default=1.0, gt=0, description="the first retry's delay; it doubles per attempt"
    )
    webhook_backoff_max_s: float = Field(
        default=3600.0, gt=0, description="the longest delay between two attempts"
    )
    webhook_retention_days: int = Field(
        default=7, ge=1, description="delivered events are kept this long, then pruned"
    )
