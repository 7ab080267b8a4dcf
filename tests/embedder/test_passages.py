"""Long turns embedded as passages (docs/embeddings.md, "Passages"): the cut itself,
and through the real pipeline (Redis → ingest → embedder with the local model →
PostgreSQL → message search): a fact buried deep in a long assistant turn is found by
meaning and the turn comes back once; a 300,000-character turn is stored whole, not
dead-lettered, and a fact near its end is found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from services.query.ranking.fusion import MESSAGE_MODES
from services.query.ranking.turns import rank_turns
from shared.embeddings import fit_to_column, resolve_embedder
from shared.embeddings.passages import split
from shared.events import TurnReceived
from shared.streams import Publisher
from tests.ingest.helpers import dead_entries
from tests.support import running, wait_for

FILLER = [
    "The migration plan moves the orders table to the new schema in three steps.",
    "First we add the nullable columns and backfill them in batches of ten thousand.",
    "Then the application writes both shapes while the readers switch over one by one.",
    "Finally the old columns are dropped once a week has passed without errors.",
    "Keep an eye on replication lag while the backfill runs, and pause it above a minute.",
    "Index builds should be concurrent so that writes are never blocked for long.",
]
# a section of the answer about something else than its head (as an assistant's long
# answers have: headed sections, lists)
FACT = (
    "About the team offsite: it will be held in Lisbon, Portugal, in early June. The "
    "offsite hotel is by the river, the company covers the flights, and the offsite "
    "agenda has two planning days and one day of sightseeing in Lisbon."
)
QUERY = "Where will the team offsite take place?"


def _filler(chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        line = FILLER[len(out) % len(FILLER)]
        out.append(line)
        n += len(line) + 1
    return " ".join(out)


def test_a_short_turn_has_no_passages_and_a_long_one_is_covered_with_overlap() -> None:
    assert split("a few words only") == []
    text = _filler(5000)
    parts = split(text, size=800, overlap=100)
    assert [p.idx for p in parts] == list(range(len(parts)))
    assert all(len(p.text) <= 800 for p in parts)
    # the head (idx 0, the turn's own vector) first; passages overlap and reach the end
    assert parts[0].start == 0 and parts[-1].end == len(text)
    assert all(b.start < a.end for a, b in zip(parts, parts[1:], strict=False))
    # cut after a sentence
    assert all(text[p.end - 1] == "." for p in parts[:-1])


def test_whitespace_runs_and_one_long_word_are_cut_within_the_size() -> None:
    # mostly spaces (BEAM's 348,853-character message): only its words count
    assert split(" " * 300_000 + "one two three" + " " * 50_000) == []
    padded = "x " + " " * 200_000 + _filler(2000)
    parts = split(padded)
    assert parts and all(len(p.text) <= 800 for p in parts)
    blob = "q" * 3000
    assert [(p.start, p.end) for p in split(blob)] == [
        (0, 800),
        (800, 1600),
        (1600, 2400),
        (2400, 3000),
    ]


async def _ready(pool: asyncpg.Pool, user_id: str, n: int) -> bool:
    return (
        await pool.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = $1 AND embedding_state = 'ready'",
            user_id,
        )
        == n
    )


async def _search(
    pool: asyncpg.Pool, es: EmbedderSettings, user_id: str, query: str, mode: Any
) -> list[Any]:
    """Message search in ``mode``, its semantic side reading passages (the spec's
    ``semantic_passages``: measured, kept on no surface, docs/retrieval.md)."""
    embedder = await resolve_embedder(pool, user_id, es)
    assert embedder is not None
    [q] = await embedder.embed([query])
    return await rank_turns(
        pool,
        MESSAGE_MODES[mode].but(semantic_passages=True),
        user_id=user_id,
        query=query,
        vector=fit_to_column(q, es.embedding_dim),
        limit=10,
    )


@pytest.mark.slow
async def test_a_fact_deep_in_a_long_assistant_turn_is_found_by_meaning_once(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    user_id: str,
) -> None:
    es: EmbedderSettings = make_settings(EmbedderSettings)  # system provider: local
    ingest_settings: IngestSettings = make_settings(IngestSettings, stream_prefix=es.stream_prefix)
    long_turn = _filler(3000) + " " + FACT + " " + _filler(2000)
    others = [
        "Can you review my plan for the database migration?",
        "What should I watch while the backfill runs?",
        "We booked the venue for the product launch party downtown.",
        "I will be travelling to Berlin for a conference in May.",
    ]
    turns = [
        TurnReceived(user_id=user_id, provider="test", chat_id="c", role="user", content=others[0]),
        TurnReceived(
            user_id=user_id, provider="test", chat_id="c", role="assistant", content=long_turn
        ),
        *(
            TurnReceived(user_id=user_id, provider="test", chat_id="c", role="user", content=t)
            for t in others[1:]
        ),
    ]
    async with running(ingest_app(ingest_settings)), running(embedder_app(es)):
        await Publisher(redis, es).publish("turns", turns)
        await wait_for(lambda: _ready(pool, user_id, 5), timeout=180, message="5 ready turns")
    long_id = await pool.fetchval(
        "SELECT id FROM messages WHERE user_id = $1 AND role = 'assistant'", user_id
    )
    stored = await pool.fetch(
        "SELECT idx, start_char, end_char FROM message_passages WHERE message_id = $1 "
        "AND user_id = $2 ORDER BY idx",
        long_id,
        user_id,
    )
    assert len(stored) == len(split(long_turn)) >= 6
    assert any(r["start_char"] <= long_turn.index(FACT) < r["end_char"] for r in stored)
    # the head is stored with the turn's own vector (not embedded again), words indexed
    assert await pool.fetchval(
        "SELECT p.embedding = m.embedding AND p.fts @@ 'migrat'::tsquery"
        " FROM message_passages p JOIN messages m ON m.id = p.message_id"
        " WHERE p.message_id = $1 AND p.idx = 0",
        long_id,
    )
    # the turn's own vector (its head) does not know the fact: the passage does
    for mode in ("semantic", "fused"):
        hits = await _search(pool, es, user_id, QUERY, mode)
        assert hits[0].id == long_id, mode
        assert [h.id for h in hits].count(long_id) == 1, mode
    embedder = await resolve_embedder(pool, user_id, es)
    assert embedder is not None
    [q] = await embedder.embed([QUERY])
    head, best = await pool.fetchrow(
        """
        SELECT 1 - (m.embedding <=> $2) AS head,
               (SELECT max(1 - (p.embedding <=> $2)) FROM message_passages p
                WHERE p.message_id = m.id) AS best
        FROM messages m WHERE m.id = $1
        """,
        long_id,
        fit_to_column(q, es.embedding_dim),
    )
    assert best > head + 0.1
    [hit] = [h for h in await _search(pool, es, user_id, QUERY, "semantic") if h.id == long_id]
    assert hit.cosine is not None and abs(hit.cosine - best) < 1e-4


@pytest.mark.slow
@pytest.mark.timeout(600)  # some 60 passages through the local model on a loaded machine
async def test_a_300000_character_turn_is_stored_whole_and_its_end_is_findable(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    user_id: str,
) -> None:
    es: EmbedderSettings = make_settings(EmbedderSettings)
    ingest_settings: IngestSettings = make_settings(IngestSettings, stream_prefix=es.stream_prefix)
    # a pasted log: 300,000 characters of distinct lines padded to a wide column (as
    # BEAM's 348,853-character message is mostly spaces), the fact near its end
    lines = [f"2026-03-{1 + i % 28:02d} job {i:06d} finished".ljust(240) for i in range(1300)]
    body = "\n".join(lines)
    huge = "Here is the log you asked for:\n" + body[:280_000] + "\n" + FACT + "\n"
    huge += body[: 300_000 - len(huge)]
    assert len(huge) == 300_000
    turns = [
        TurnReceived(user_id=user_id, provider="test", chat_id="c", role="user", content=huge),
        TurnReceived(user_id=user_id, provider="test", chat_id="c", role="user", content=FILLER[0]),
    ]
    async with running(ingest_app(ingest_settings)), running(embedder_app(es)):
        await Publisher(redis, es).publish("turns", turns)
        await wait_for(lambda: _ready(pool, user_id, 2), timeout=540, message="2 ready turns")
        assert await dead_entries(redis, es) == []
    row = await pool.fetchrow(
        "SELECT id, length(content) AS n FROM messages "
        "WHERE user_id = $1 AND length(content) > 1000",
        user_id,
    )
    assert row["n"] == 300_000
    passages = await pool.fetchval(
        "SELECT count(*) FROM message_passages WHERE message_id = $1", row["id"]
    )
    assert passages == len(split(huge))
    hits = await _search(pool, es, user_id, QUERY, "semantic")
    assert hits[0].id == row["id"]
    # the words of its first 200,000 characters are indexed (migration 0160), and
    # every passage's: the bm25 mode reads them (``lexical_passages``)
    lexical = await _search(pool, es, user_id, "job 000042 finished", "bm25")
    assert lexical[0].id == row["id"]
    lexical = await _search(pool, es, user_id, "offsite Lisbon agenda", "bm25")
    assert lexical[0].id == row["id"]
