"""Embedding settings: the system default provider and the key that encrypts users' API keys.

Any service that embeds (the embedder, the query service for search queries,
the CLI for rebuilds) uses a settings class derived from ``EmbeddingSettings``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from shared.settings import CommonSettings


class EmbeddingSettings(CommonSettings):
    """``ENGRAM_EMBEDDING_*`` and ``ENGRAM_SECRET_KEY``."""

    embedding_provider: Literal["local", "openai", "ollama", "none"] = Field(
        default="local",
        description="the system provider; it takes precedence over users' endpoints "
        "(Nova 3.1.3). 'none' = users' own endpoints, else full-text-only",
    )
    embedding_user_override: bool = Field(
        default=False, description="let a user's own endpoint win over the system provider"
    )
    embedding_model: str = Field(
        default="all-MiniLM-L6-v2-int8",
        description="model name of the system provider; local: all-MiniLM-L6-v2-int8 "
        "(ONNX Runtime, int8; the default) or all-MiniLM-L6-v2 (the same model in PyTorch)",
    )
    embedding_url: str | None = Field(
        default=None, description="base URL of the system openai/ollama endpoint"
    )
    embedding_api_key: SecretStr | None = Field(default=None, description="its API key")
    embedding_dimensions: int | None = Field(
        default=None, description="dimensions to ask the system provider for (openai only)"
    )
    embedding_timeout_s: float = Field(default=30.0, description="per HTTP request")
    embedding_retries: int = Field(
        default=3, description="retries of one HTTP call on timeouts, 429 and 5xx"
    )
    embedding_backoff_s: float = Field(default=0.5, description="first retry delay, doubled")
    embedding_concurrency: int = Field(
        default=4, description="requests in flight at once per HTTP endpoint"
    )
    embedding_endpoint_allow: str = Field(
        default="",
        description="users' endpoints may only resolve to public addresses, except these "
        "(comma-separated networks or host names, '*' = anything): e.g. 10.0.0.0/8,ollama.lan",
    )
    embedding_deadline_s: float = Field(
        default=120.0, gt=0, description="longest one embedding call may take, retries included"
    )
    embedding_query_deadline_s: float = Field(
        default=3.0,
        gt=0,
        description="longest a search or remember waits for an HTTP provider to embed its "
        "text; then it goes on full-text-only (the text is embedded later)",
    )
    embedding_circuit_failures: int = Field(
        default=3, ge=1, description="failed calls in a row that open an endpoint's circuit"
    )
    embedding_circuit_cooldown_s: float = Field(
        default=15.0,
        gt=0,
        description="an open circuit refuses calls this long (doubled each time it re-opens)",
    )
    embedding_local_batch: int = Field(
        default=64, description="texts per forward pass of the local model"
    )
    embedding_local_workers: int = Field(
        default=1, ge=1, description="forward passes of the local model at once"
    )
    embedding_local_threads: int = Field(
        default=0, ge=0, description="CPU threads per forward pass; 0 = every core"
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Fernet key that encrypts users' API keys; unset = generated once "
        "into <data_dir>/secret.key",
    )
