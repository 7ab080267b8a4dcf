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
    max_request_bytes: int = Field(
        default=1_000_000,
        ge=1_000,
        description="largest request body the API accepts (bytes); larger ones get 413",
    )
