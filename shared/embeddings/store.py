"""Reading texts to embed and writing vectors back, for messages, memory items and episodes.

Every statement is scoped by user. Writes are guarded so they are idempotent and
never mix models: a vector lands only on a row that is still ``pending`` and
whose pending metadata (set by a rebuild) names the same provider and model, or
none. The three tables share the embedding columns (docs/contracts.md).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from pgvector import Vector

from shared.embeddings import passages as passage_split
from shared.embeddings.passages import Passage
from shared.events import EmbedKind

MAX_TOOL_CHARS = 300

Executor = asyncpg.Connection | asyncpg.Pool | PoolConnectionProxy


@dataclass(frozen=True)
class Table:
    kind: EmbedKind
    name: str
    id_type: str  # SQL type of the id column
    text_sql: str  # SQL of what the text to embed is made of
    touched: str  # the column that says when the row last changed (made pending)


TABLES: dict[EmbedKind, Table] = {
    "message": Table(
        "message",
        "messages",
        "bigint",
        # with who said it and when (docs/retrieval.md: what each bought)
        "content, role, tool_name, tool_args, tool_result, display_name, occurred_at",
        "created_at",
    ),
    "memory": Table("memory", "memory_items", "uuid", "content", "updated_at"),
    "episode": Table("episode", "episodes", "uuid", "summary_text AS content", "updated_at"),
}


# WAITING: the statements that look rows up by id write "pending" as "neither
# ready nor error" (the CHECK allows only those three). Said as "= 'pending'" it
# lets the planner use the partial index of pending rows, whose statistics say
# "almost none" while thousands wait after a burst: it then hashed every pending
# row of the table for each 64-row write (bench/embed: 10 ms a write, ~3 s of
# database CPU per 5,000 turns, taken from the model's cores). Said this way,
# only the primary key can find them: 64 look-ups.
#
# A read of many rows (an embedder read merges up to 200 requests: thousands of
# rows) joins its (owner, id) pairs to the table first and tests the state after
# (OFFSET 0 keeps the two apart). With the test in the join, the statistics'
# "almost none pending" made the planner scan the table once and compare each row
# it kept with every pair: 9 million comparisons, 307 ms, for 3,000 rows of a
# 17,000-row table, against 15 ms so.
def _statements(t: Table) -> dict[str, str]:
    # Table and column names come from the fixed TABLES above, never from input.
    return {
        "owners": f"""
            SELECT user_id, id FROM {t.name}
            WHERE id = ANY($1::{t.id_type}[])
              AND embedding_state NOT IN ('ready', 'error')  -- pending: see WAITING
        """,
        # (owner, id) pairs, many users at once; a row comes back only to its owner
        "fetch": f"""
            SELECT user_id, id, embedding_provider, embedding_model, {t.text_sql}
            FROM (SELECT t.*
                  FROM unnest($1::text[], $2::{t.id_type}[]) AS u(user_id, id)
                  JOIN {t.name} AS t ON t.id = u.id AND t.user_id = u.user_id
                  OFFSET 0) AS t
            WHERE embedding_state NOT IN ('ready', 'error')  -- pending: see WAITING
        """,
        "write": f"""
            UPDATE {t.name} AS t
            SET embedding = u.vec, embedding_state = 'ready', embedding_error = NULL,
                embedding_provider = $3, embedding_model = $4, embedding_dims = u.dims,
                embedded_at = now(), embedding_attempts = 0, embedding_retry_at = NULL,
                -- into the HNSW index only for users listed for it (vector_index.py)
                vector_indexed = EXISTS (
                    SELECT 1 FROM vector_index_users v
                    WHERE v.user_id = t.user_id AND v.kind = '{t.kind}')
            FROM unnest($1::text[], $2::{t.id_type}[], $5::vector[], $6::int[])
                 AS u(user_id, id, vec, dims)
            WHERE t.user_id = u.user_id AND t.id = u.id
              AND t.embedding_state NOT IN ('ready', 'error')  -- pending: see WAITING
              AND (t.embedding_provider IS NULL
                   OR (t.embedding_provider = $3 AND t.embedding_model = $4))
            RETURNING t.user_id, t.id
        """,
        "fail": f"""
            UPDATE {t.name} AS t
            SET embedding = NULL, embedding_state = 'error', embedding_error = u.error,
                embedding_provider = $3, embedding_model = $4, embedded_at = now(),
                embedding_retry_at = NULL
            FROM unnest($2::{t.id_type}[], $5::text[]) AS u(id, error)
            WHERE t.user_id = $1 AND t.id = u.id
              AND t.embedding_state NOT IN ('ready', 'error')  -- pending: see WAITING
              AND (t.embedding_provider IS NULL
                   OR (t.embedding_provider = $3 AND t.embedding_model = $4))
            RETURNING t.id
        """,
        "defer": f"""
            UPDATE {t.name}
            SET embedding_attempts = embedding_attempts + 1, embedding_error = $3,
                embedding_retry_at = now() + least($4::float8 * 2 ^ embedding_attempts,
                                                   $5::float8) * interval '1 second'
            WHERE user_id = $1 AND id = ANY($2::{t.id_type}[]) AND embedding_state = 'pending'
        """,
        # a lease: the row is being embedded out of line; the retry sweep leaves it
        # alone until then (a crash leaves it to the sweep after that)
        "lease": f"""
            UPDATE {t.name}
            SET embedding_retry_at = now() + $3::float8 * interval '1 second'
            WHERE user_id = $1 AND id = ANY($2::{t.id_type}[]) AND embedding_state = 'pending'
        """,
        "due": f"""
            SELECT user_id, id FROM {t.name}
            WHERE embedding_state = 'pending' AND embedding_retry_at <= now()
            ORDER BY embedding_retry_at
            LIMIT $1
        """,
        # ORPHANS: pending, never tried, no retry time, untouched for $1 seconds: its
        # EmbedRequested was lost or dead-lettered (docs/embeddings.md).
        "orphans": f"""
            SELECT user_id, id FROM {t.name}
            WHERE embedding_state = 'pending' AND embedding_retry_at IS NULL
              AND embedding_attempts = 0
              AND {t.touched} < now() - $1::float8 * interval '1 second'
            ORDER BY {t.touched}
            LIMIT $2
        """,
        # Rows of a user with no provider (full-text only) that the sweep found: they
        # wait for a provider (a rebuild resets them) and are never swept again.
        "park": f"""
            UPDATE {t.name}
            SET embedding_attempts = embedding_attempts + 1, embedding_error = $3,
                embedding_retry_at = NULL
            WHERE user_id = $1 AND id = ANY($2::{t.id_type}[]) AND embedding_state = 'pending'
        """,
    }


SQL: dict[EmbedKind, dict[str, str]] = {k: _statements(t) for k, t in TABLES.items()}


@dataclass(frozen=True)
class Row:
    """One row to embed: where it lives, its text, and the metadata it is pending with."""

    kind: EmbedKind
    id: int | uuid.UUID
    text: str
    pending_provider: str | None
    pending_model: str | None
    # a long turn's passages after its head, each with the text to embed
    # (``passages.py``); their vectors are written with the row's own
    passages: tuple[Passage, ...] = ()


def parse_id(kind: EmbedKind, raw: str) -> int | uuid.UUID:
    """The typed id of a target; ValueError for something that cannot be one."""
    if TABLES[kind].id_type == "bigint":
        return int(raw)
    return uuid.UUID(raw)


def _brief(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_TOOL_CHARS else text[:MAX_TOOL_CHARS] + "…"


def message_text(
    content: str,
    role: str,
    tool_name: str | None,
    tool_args: Any,
    tool_result: Any,
    *,
    speaker: str | None = None,
    at: datetime | None = None,
) -> str:
    """What is embedded for a turn: ``<date> <speaker>: <content>``.

    The date (``occurred_at``, UTC) and the speaker (display name, else the role)
    let a question that names a person or a time find the turn; a tool turn names
    the tool and, briefly, its args and result instead of a speaker."""
    if role != "tool" and not tool_name:
        return message_head(role, speaker=speaker, at=at) + content
    body = [content] if content else []
    if tool_args not in (None, {}, []):
        body.append(f"args: {_brief(tool_args)}")
    if tool_result is not None:
        body.append(f"result: {_brief(tool_result)}")
    head = f"tool {tool_name}" if tool_name else "tool"
    return f"{head}: {' | '.join(body)}" if body else head


def message_head(role: str, *, speaker: str | None = None, at: datetime | None = None) -> str:
    """``<date> <speaker>: ``, what a turn's text and each of its passages start with."""
    who = (speaker or "").strip() or role
    return f"{at:%d %B %Y} {who}: " if at is not None else f"{who}: "


def collapse(text: str) -> str:
    """``text`` with every run of whitespace as one space (what a word-piece model
    reads anyway), so that a turn padded with spaces keeps its words within the cut."""
    return " ".join(text.split())


async def owners(
    conn: Executor, kind: EmbedKind, ids: Sequence[int | uuid.UUID]
) -> list[tuple[str, int | uuid.UUID]]:
    """(owner, id) of the pending rows among ``ids``: for requests that span users."""
    if not ids:
        return []
    return [(r["user_id"], r["id"]) for r in await conn.fetch(SQL[kind]["owners"], list(ids))]


async def fetch_pending(
    conn: Executor,
    user_id: str,
    kind: EmbedKind,
    ids: Sequence[int | uuid.UUID],
    *,
    max_chars: int,
    passage_chars: int = passage_split.SIZE,
) -> list[Row]:
    """The user's rows among ``ids`` that still wait for a vector, with their text."""
    return [
        row
        for _, row in await fetch_pending_many(
            conn,
            kind,
            [(user_id, i) for i in ids],
            max_chars=max_chars,
            passage_chars=passage_chars,
        )
    ]


async def fetch_pending_many(
    conn: Executor,
    kind: EmbedKind,
    wanted: Sequence[tuple[str, int | uuid.UUID]],
    *,
    max_chars: int,
    passage_chars: int = passage_split.SIZE,
) -> list[tuple[str, Row]]:
    """(owner, row) for the (owner, id) pairs still waiting for a vector: many users'
    rows in one statement, each only if it belongs to the user it was asked for. A
    turn longer than ``passage_chars`` (0: never) comes with its passages."""
    if not wanted:
        return []
    owners, ids = zip(*wanted, strict=True)
    out = []
    for r in await conn.fetch(SQL[kind]["fetch"], list(owners), list(ids)):
        parts: tuple[Passage, ...] = ()
        if kind == "message":
            plain = r["role"] != "tool" and not r["tool_name"]
            text = (
                message_text(
                    collapse(r["content"]) if plain else r["content"],
                    r["role"],
                    r["tool_name"],
                    r["tool_args"],
                    r["tool_result"],
                    speaker=r["display_name"],
                    at=r["occurred_at"],
                )
                if r["content"] or r["tool_name"] or r["role"] == "tool"
                else ""
            )
            if plain and passage_chars > 0 and len(r["content"]) > passage_chars:
                head = message_head(r["role"], speaker=r["display_name"], at=r["occurred_at"])
                parts = tuple(
                    Passage(p.idx, p.start, p.end, (head + p.text)[:max_chars])
                    for p in passage_split.split(r["content"], size=passage_chars)
                )
        else:
            text = r["content"] or ""
        out.append(
            (
                r["user_id"],
                Row(
                    kind,
                    r["id"],
                    text.strip()[:max_chars],
                    r["embedding_provider"],
                    r["embedding_model"],
                    parts,
                ),
            )
        )
    return out


async def write_vectors(
    conn: Executor,
    user_id: str,
    kind: EmbedKind,
    *,
    provider: str,
    model: str,
    ids: Sequence[int | uuid.UUID],
    vectors: Sequence[Sequence[float]],
    native_dims: Sequence[int],
) -> list[Any]:
    """Store one user's vectors (already fitted to the column); return the ids that
    became ready."""
    written = await write_vectors_many(
        conn,
        kind,
        provider=provider,
        model=model,
        owners=[user_id] * len(ids),
        ids=ids,
        vectors=vectors,
        native_dims=native_dims,
    )
    return [row_id for _, row_id in written]


async def write_vectors_many(
    conn: Executor,
    kind: EmbedKind,
    *,
    provider: str,
    model: str,
    owners: Sequence[str],
    ids: Sequence[int | uuid.UUID],
    vectors: Sequence[Sequence[float]],
    native_dims: Sequence[int],
) -> list[tuple[str, Any]]:
    """Store vectors of many users' rows in one statement, each row matched on its
    owner and id; return (owner, id) of the rows that became ready."""
    if not ids:
        return []
    rows = await conn.fetch(
        SQL[kind]["write"],
        list(owners),
        list(ids),
        provider,
        model,
        [Vector(list(v)) for v in vectors],
        list(native_dims),
    )
    return [(r["user_id"], r["id"]) for r in rows]


# A turn's passages are replaced whenever its own vector is written (the same
# transaction): they are of the model its vector is, and a search reads them only
# while the turn is ``ready`` (a rebuild that marks it pending hides them until its
# new vector and passages replace them). In the HNSW index when the turn's owner is
# listed for messages' (vector_index.py), as the turn itself.
# by owner and turn: the key of a partitioned table (migration 0170) leads with the user
DROP_PASSAGES = """
DELETE FROM message_passages p
USING unnest($1::text[], $2::bigint[]) AS u(user_id, id)
WHERE p.user_id = u.user_id AND p.message_id = u.id
"""
WRITE_PASSAGES = """
INSERT INTO message_passages (message_id, idx, user_id, start_char, end_char, embedding,
                              fts, speaker, turn_lexemes, vector_indexed)
SELECT u.id, u.idx, u.user_id, u.s, u.e, u.vec,
       to_tsvector('english', substr(m.content, u.s + 1, u.e - u.s)),
       coalesce(m.display_name, ''), length(m.fts),
       EXISTS (SELECT 1 FROM vector_index_users v
               WHERE v.user_id = u.user_id AND v.kind = 'message')
FROM unnest($1::text[], $2::bigint[], $3::int[], $4::int[], $5::int[], $6::vector[])
     AS u(user_id, id, idx, s, e, vec)
JOIN messages m ON m.id = u.id AND m.user_id = u.user_id
"""


async def write_passages(
    conn: Executor,
    written: Sequence[tuple[str, Any]],
    passages: dict[tuple[str, Any], Sequence[tuple[Passage, Sequence[float]]]],
) -> int:
    """Replace the passages of the turns in ``written`` ((owner, id) whose own vector
    was just stored) by ``passages`` (each with its vector, fitted); the count written."""
    if not written:
        return 0
    await conn.execute(DROP_PASSAGES, [o for o, _ in written], [int(i) for _, i in written])
    cols: tuple[list[Any], ...] = ([], [], [], [], [], [])
    for owner, row_id in written:
        for passage, vec in passages.get((owner, row_id), ()):
            for col, value in zip(
                cols,
                (owner, int(row_id), passage.idx, passage.start, passage.end, Vector(list(vec))),
                strict=True,
            ):
                col.append(value)
    if cols[0]:
        await conn.execute(WRITE_PASSAGES, *cols)
    return len(cols[0])


async def mark_errors(
    conn: Executor,
    user_id: str,
    kind: EmbedKind,
    *,
    provider: str,
    model: str,
    errors: dict[Any, str],
) -> list[Any]:
    """Put rows in ``error`` with their message; return the ids changed."""
    if not errors:
        return []
    ids = list(errors)
    rows = await conn.fetch(
        SQL[kind]["fail"], user_id, ids, provider, model, [errors[i][:2000] for i in ids]
    )
    return [r["id"] for r in rows]


async def defer(
    conn: Executor,
    user_id: str,
    kind: EmbedKind,
    ids: Sequence[Any],
    *,
    error: str,
    backoff_s: float,
    max_backoff_s: float,
) -> None:
    """Keep rows pending and schedule another try (exponential backoff per row)."""
    if ids:
        await conn.execute(
            SQL[kind]["defer"], user_id, list(ids), error[:2000], backoff_s, max_backoff_s
        )


async def lease(
    conn: Executor, user_id: str, kind: EmbedKind, ids: Sequence[Any], *, seconds: float
) -> None:
    """Keep the retry sweep off rows embedded out of line for ``seconds``."""
    if ids:
        await conn.execute(SQL[kind]["lease"], user_id, list(ids), seconds)


async def due_for_retry(conn: Executor, kind: EmbedKind, *, limit: int) -> list[tuple[str, Any]]:
    """Deferred rows whose retry time has come, across users (the embedder's own sweep)."""
    return [(r["user_id"], r["id"]) for r in await conn.fetch(SQL[kind]["due"], limit)]


async def orphans(
    conn: Executor, kind: EmbedKind, *, older_than_s: float, limit: int
) -> list[tuple[str, Any]]:
    """Pending rows never tried, with no retry time, untouched for ``older_than_s``:
    rows whose request was lost or dead-lettered (the sweep's safety net)."""
    return [
        (r["user_id"], r["id"]) for r in await conn.fetch(SQL[kind]["orphans"], older_than_s, limit)
    ]


async def park(
    conn: Executor, user_id: str, kind: EmbedKind, ids: Sequence[Any], *, reason: str
) -> None:
    """Leave rows the sweep found pending without a retry time and out of its sight
    (``embedding_attempts`` > 0): their user has no provider; a rebuild resets them."""
    if ids:
        await conn.execute(SQL[kind]["park"], user_id, list(ids), reason[:2000])
