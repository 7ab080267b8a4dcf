from __future__ import annotations

from pydantic import Field

from shared.embeddings import EmbeddingSettings
from shared.llm.settings import LLMSettings


class QuerySettings(LLMSettings, EmbeddingSettings):
    """Settings of the agent API (a language model is optional: decision rewrites)."""

    warm_up: bool = Field(
        default=True,
        description="load the default embedding model at start-up, so the first search does "
        "not wait for it (/health answers once it is loaded)",
    )
    cookie_secure: bool = Field(
        default=False, description="mark the browser's key cookie Secure (set true behind HTTPS)"
    )
    max_request_bytes: int = Field(
        default=1_000_000,
        ge=1_000,
        description="largest request body the API accepts (bytes); larger ones get 413",
    )
