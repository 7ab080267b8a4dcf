"""The ``Embedder`` interface every provider implements, and fitting vectors to the column.

An embedder turns texts into vectors, one per text, in order. It raises
``ProviderUnavailable`` when the provider is down or throttling (try again later)
and ``ProviderError`` when it refuses the input or answers nonsense (retrying
will not help). It never returns a partial result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from shared.errors import InvalidRequest

PROVIDERS = ("local", "openai", "ollama")


@runtime_checkable
class Embedder(Protocol):
    """A configured embedding model. ``embed(["one query"])`` is fine for a search query."""

    @property
    def provider(self) -> str:
        """``local``, ``openai`` or ``ollama``; stored in ``embedding_provider``."""
        ...

    @property
    def model(self) -> str:
        """The model name; stored in ``embedding_model``."""
        ...

    @property
    def dimensions(self) -> int | None:
        """The vector length when known in advance (configured or intrinsic), else None."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. Raises ProviderError / ProviderUnavailable."""
        ...


class DimensionTooLarge(InvalidRequest):
    """A vector longer than the database column; it cannot be stored."""


def fit_to_column(vector: Sequence[float], dim: int) -> list[float]:
    """Zero-pad ``vector`` to ``dim`` (cosine similarity is unchanged by padding).

    Raises DimensionTooLarge when the vector is longer than the column."""
    n = len(vector)
    if n > dim:
        raise DimensionTooLarge(
            f"the provider returned {n} dimensions but the vector column holds {dim} "
            f"(ENGRAM_EMBEDDING_DIM); choose a model with at most {dim} dimensions, "
            "or ask it for fewer (dimensions setting)"
        )
    if n == 0:
        raise DimensionTooLarge("the provider returned an empty vector")
    out = [float(x) for x in vector]
    if n < dim:
        out.extend([0.0] * (dim - n))
    return out
