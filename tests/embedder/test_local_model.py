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


async def test_passes_at_once_on_one_thread_each_give_the_same_vectors() -> None:
    """The embedder's configuration (a pass per core, one thread each) embeds the
    same texts to the same vectors as one pass at a time on every core."""
    import asyncio

    import torch

    from shared.embeddings import local

    texts = [f"note {i}: the plumber fixes the kitchen tap on day {i}" for i in range(48)]
    chunks = [texts[i : i + 16] for i in range(0, len(texts), 16)]
    try:
        local.configure(workers=1, threads=0)
        one_at_a_time = local.encode(texts, batch_size=16)
        local.configure(workers=2, threads=1)
        assert torch.get_num_threads() == 1
        parts = await asyncio.gather(
            *(asyncio.to_thread(local.encode, c, batch_size=16) for c in chunks)
        )
    finally:
        local.configure(workers=1, threads=0)
    together = [v for part in parts for v in part]
    assert len(together) == len(one_at_a_time) == 48
    for a, b in zip(one_at_a_time, together, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4


def test_the_embedder_keeps_one_call_more_in_flight_than_model_passes() -> None:
    """Every pass has work while another call's vectors are being written."""
    from services.embedder.service import options
    from services.embedder.settings import EmbedderSettings

    assert options(EmbedderSettings(embedding_local_workers=6, embed_parallel=2)).parallel == 7
    assert options(EmbedderSettings(embedding_local_workers=1, embed_parallel=3)).parallel == 3


async def test_a_turns_stored_vector_is_the_bare_models_vector_of_its_text(
    pool: asyncpg.Pool, redis: Any, make_settings: Callable[..., Any], user_id: str
) -> None:
    """Nothing between the model and the column changes a turn's vector: a turn sent
    through ingest and the embedder is stored as the bare model embeds the text
    ``message_text`` names (docs/retrieval.md: what is embedded for a turn)."""
    from datetime import UTC, datetime

    from services.embedder.app import create_app as embedder_app
    from services.embedder.settings import EmbedderSettings
    from services.ingest.app import create_app as ingest_app
    from services.ingest.settings import IngestSettings
    from shared.embeddings import local
    from shared.embeddings.store import message_text
    from shared.events import TurnReceived
    from shared.streams import Publisher
    from tests.support import running, wait_for

    es = make_settings(EmbedderSettings, embedding_provider="local")
    ingest = make_settings(IngestSettings, stream_prefix=es.stream_prefix)
    content = "We adopted a rescue puppy last weekend and named him Biscuit!"
    at = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turn = TurnReceived(
        occurred_at=at,
        user_id=user_id,
        display_name="Ann",
        provider="test",
        chat_id="c1",
        role="user",
        content=content,
    )
    async with running(ingest_app(ingest)), running(embedder_app(es)):
        await Publisher(redis, es).publish("turns", [turn])

        async def stored() -> Any:
            return await pool.fetchval(
                "SELECT embedding FROM messages WHERE user_id = $1 AND embedding_state = 'ready'",
                user_id,
            )

        vector = (await wait_for(stored, timeout=120, message="the turn embedded")).to_list()

    text = message_text(content, "user", None, None, None, speaker="Ann", at=at)
    assert text == EMBEDDED_TURN_TEXT
    [bare] = local.encode([text], batch_size=1, model=es.embedding_model)
    assert len(vector) == len(bare) == 384
    # float32 end to end: equal to rounding (a half-precision copy would be ~1e-4 off)
    assert max(abs(x - y) for x, y in zip(vector, bare, strict=True)) < 1e-6
    # the text is the turn's own: another text's vector would not pass
    [other] = local.encode([f"Ann: {content} (edited)"], batch_size=1, model=es.embedding_model)
    assert max(abs(x - y) for x, y in zip(vector, other, strict=True)) > 1e-3


# What the embedder embeds for the turn above (docs/retrieval.md says why).
EMBEDDED_TURN_TEXT = (
    "08 May 2023 Ann: We adopted a rescue puppy last weekend and named him Biscuit!"
)
