"""The real local model: paraphrases land closer than unrelated sentences, in pgvector too."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from shared.embeddings import EmbeddingSettings, resolve_embedder

pytestmark = pytest.mark.slow


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def test_paraphrases_score_closer_than_unrelated_sentences(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    s = make_settings(EmbeddingSettings)
    embedder = await resolve_embedder(pool, user_id, s)
    assert embedder is not None
    a, b, c = await embedder.embed(
        [
            "My daughter's birthday party is on Saturday.",
            "We are celebrating my girl's birthday this weekend.",
            "The quarterly tax filing deadline moved to April.",
        ]
    )
    assert len(a) == 384
    assert cosine(a, b) > cosine(a, c) + 0.2
    [q] = await embedder.embed(["when is the kid's birthday celebration?"])
    assert cosine(q, b) > cosine(q, c)
