"""What the memory use cases need from an embedding provider, and vector helpers.

``shared.embeddings`` (the embedder issue) provides the real providers.
``TextEmbedder`` is any object with an async ``embed(texts)`` returning one
vector per text; ``ModelEmbedder`` also names its provider and model, which is
needed wherever vectors are stored or compared (only vectors of the same model
are comparable). ``tsquery`` turns free text into an OR of its English lexemes,
so a whole sentence matches rows that share any word with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from shared.embeddings.base import fit_to_column


class TextEmbedder(Protocol):
    async def embed(self, texts: Sequence[str]) -> Any:
        """One vector (a sequence of floats) per text, in order."""
        ...


class ModelEmbedder(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def fit(vector: Sequence[float], dim: int) -> list[float]:
    """A vector zero-padded to the column's dimension; a longer one is an error
    (``DimensionTooLarge``, an ``EngramError``). See ``fit_to_column``."""
    return fit_to_column(vector, dim)


def tsquery(n: int) -> str:
    """SQL for an OR query of the English lexemes of parameter ``$n`` (quoted, so
    punctuation cannot break it)."""
    return (
        "to_tsquery('simple', coalesce(array_to_string(ARRAY("
        f"SELECT quote_literal(l) FROM unnest(tsvector_to_array(to_tsvector('english', ${n}))) "
        "AS l), ' | '), ''))"
    )
