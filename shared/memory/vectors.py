"""What the memory use cases need from an embedding provider, and vector helpers.

``shared.embeddings`` (the embedder issue) provides the real providers; any
object with an async ``embed(texts)`` returning one vector per text fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from shared.errors import InfrastructureError


class TextEmbedder(Protocol):
    async def embed(self, texts: Sequence[str]) -> Any:
        """One vector (a sequence of floats) per text, in order."""
        ...


def fit(vector: Sequence[float], dim: int) -> list[float]:
    """A vector zero-padded to the column's dimension; a longer one is an error."""
    values = [float(x) for x in vector]
    if len(values) > dim:
        raise InfrastructureError(f"vector of {len(values)} dimensions exceeds the column's {dim}")
    return values + [0.0] * (dim - len(values))
