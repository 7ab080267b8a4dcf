"""What memory code needs from an embedding provider, and the query text search.

``TextEmbedder`` is the part of ``shared.embeddings.Embedder`` used here (any
provider satisfies it). ``TSQUERY`` turns free text into an OR of its English
lexemes, so a whole sentence matches rows that share any word with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TextEmbedder(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


# $n is the free text; lexemes are quoted so punctuation cannot break the query.
def tsquery(n: int) -> str:
    return (
        "to_tsquery('simple', coalesce(array_to_string(ARRAY("
        f"SELECT quote_literal(l) FROM unnest(tsvector_to_array(to_tsvector('english', ${n}))) "
        "AS l), ' | '), ''))"
    )
