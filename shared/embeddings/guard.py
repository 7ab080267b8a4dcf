"""The guards of the embedding endpoints (:mod:`shared.guard`): which endpoint a
provider configuration calls, an embedder whose every call is guarded, and the
process's guards.

The embedder service and the query service each keep one ``Guards`` per process
(:func:`default_guards`); the local model is in-process and is not guarded.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.embeddings.base import Embedder
from shared.embeddings.providers import ProviderConfig
from shared.embeddings.settings import EmbeddingSettings
from shared.guard import Circuit, Guards

__all__ = ["Circuit", "GuardedEmbedder", "Guards", "default_guards", "endpoint_key", "guards_from"]


def endpoint_key(config: ProviderConfig) -> str | None:
    """What a circuit guards: the endpoint's base URL (None = in-process, unguarded)."""
    if config.provider == "local" or not config.endpoint_url:
        return None
    return config.endpoint_url.rstrip("/")


class GuardedEmbedder:
    """An embedder whose every call goes through :meth:`Guards.call`."""

    def __init__(
        self, inner: Embedder, key: str | None, guards: Guards, *, deadline_s: float
    ) -> None:
        self._inner = inner
        self._key = key
        self._guards = guards
        self._deadline_s = deadline_s

    @property
    def provider(self) -> str:
        return self._inner.provider

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def dimensions(self) -> int | None:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._guards.call(
            self._key, lambda: self._inner.embed(texts), deadline_s=self._deadline_s
        )


_default: Guards | None = None


def default_guards() -> Guards:
    """The process's guards (made on first use)."""
    global _default
    if _default is None:
        _default = Guards()
    return _default


def guards_from(settings: EmbeddingSettings) -> Guards:
    return Guards(
        failures_to_open=settings.embedding_circuit_failures,
        cooldown_s=settings.embedding_circuit_cooldown_s,
        per_endpoint=settings.embedding_concurrency,
    )
