"""Hybrid memory search (Nova 3.2): PostgreSQL full-text + pgvector cosine, 30/70.

What callers may rely on:

- every statement is scoped to one user (``user_id``), except the admin-only
  cross-user variant (``user_id=None`` with ``all_users=True``);
- expired items (``expires_at`` in the past) are never returned; superseded
  ones only with ``include_superseded``; ``status`` defaults to ``active``;
- ``*`` or an empty query returns the newest items (mode ``match_all``);
- otherwise the top 50 of each signal are united, each signal is min-max
  normalised over that candidate set (the semantic one as ``1 / (1 + distance)``),
  and ``score = 0.7 * semantic + 0.3 * lexical``, ties newer first then id.
  The lexical signal matches any of the query's words (an agent's query is
  natural language, not a boolean expression) and ``ts_rank`` rewards more;
  When one signal has no candidate at all (no query vector, no ready
  embedding, or no lexical match) the score is the other signal alone, so the
  modes ``fts_only`` and ``semantic_only`` still score in [0, 1];
- a user with few embedded rows is searched exactly; a large one through the
  HNSW index with pgvector 0.8's iterative scan, so the user filter never
  starves the result (the trap in DESIGN.md).
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg

from shared.db import Conn, Executor
from shared.errors import InvalidRequest

Mode = Literal["hybrid", "fts_only", "semantic_only", "match_all"]
Status = Literal["active", "archived", "any"]

CANDIDATES_PER_SIGNAL = 50
MAX_LIMIT = 50
SEMANTIC_WEIGHT = 0.7
LEXICAL_WEIGHT = 0.3
# A user with at most this many embedded rows is scanned exactly: cheaper than
# the index, and immune to the filtered-HNSW trap.
EXACT_SCAN_MAX_ROWS = 5000
SNIPPET_CHARS = 280

# $1 user ($1 NULL = every user, admin only), $2 theme, $3 status, $4 types,
# $5 created since, $6 include superseded, $7 namespace, $8 limit,
# $9 query text, $10 query vector.
_USER = "m.user_id = $1"
_ANY_USER = "($1::text IS NULL OR m.user_id = $1)"
_FILTERS = """
      AND ($2::text IS NULL OR m.theme = $2)
      AND ($3::text = 'any' OR m.status = $3)
      AND ($4::text[] IS NULL OR m.type = ANY($4))
      AND ($5::timestamptz IS NULL OR m.created_at >= $5)
      AND ($6::boolean OR m.superseded_at IS NULL)
      AND ($7::text IS NULL OR m.namespace = $7)
      AND (m.expires_at IS NULL OR m.expires_at > now())"""
_COLUMNS = "m.id, m.user_id, m.namespace, m.theme, m.type, m.content, m.importance, m.created_at"

MATCH_ALL = """
SELECT {columns}, 0.0::float8 AS score, false AS fts, false AS semantic, 0 AS n_lex, 0 AS n_sem
FROM memory_items m
WHERE {scope} {filters}
ORDER BY m.created_at DESC, m.id
LIMIT $8
"""

# Each signal's CTE carries the output columns, so the final step joins nothing.
_CARRY = "m.user_id, m.namespace, m.theme, m.type, m.content, m.importance, m.created_at"

_LEXICAL = """
lexical AS (
    SELECT m.id, {carry}, ts_rank(m.fts, q.tsq)::float8 AS rank
    FROM memory_items m, q
    WHERE {scope} AND m.fts @@ q.tsq {filters}
    ORDER BY rank DESC, m.created_at DESC, m.id
    LIMIT {k}
)"""

_NO_SEMANTIC = """
semantic AS (
    SELECT m.id, {carry}, NULL::float8 AS sim FROM memory_items m WHERE false
)"""

# Exact: "+ 0" keeps the planner off the HNSW index, so every row of the
# user's is compared (used when the user has few rows).
_SEMANTIC_EXACT = """
semantic AS (
    SELECT m.id, {carry}, 1.0 / (1.0 + (m.embedding <=> $10::vector)) AS sim
    FROM memory_items m
    WHERE {scope} AND m.embedding_state = 'ready' AND m.embedding IS NOT NULL {filters}
    ORDER BY (m.embedding <=> $10::vector) + 0, m.id
    LIMIT {k}
)"""

# Index: the HNSW index of migration 0010 is on embedding::halfvec(D), so the
# walk orders by that expression; with hnsw.iterative_scan (set by the caller)
# it keeps walking until enough of this user's rows pass the filter. The score
# still uses the full-precision distance.
_SEMANTIC_INDEX = """
semantic AS MATERIALIZED (
    SELECT m.id, {carry}, 1.0 / (1.0 + (m.embedding <=> $10::vector)) AS sim
    FROM memory_items m
    WHERE {scope} AND m.embedding_state = 'ready' {filters}
    ORDER BY m.embedding::halfvec({dim}) <=> $10::vector::halfvec({dim})
    LIMIT {k}
)"""

HYBRID = """
WITH q AS MATERIALIZED (
    -- any of the query's words (stemmed, stop words dropped); more matches rank higher
    SELECT array_to_string(ARRAY(
               SELECT quote_literal(w)
               FROM unnest(tsvector_to_array(to_tsvector('english', $9::text))) AS w
           ), ' | ')::tsquery AS tsq
),
{lexical},
{semantic},
candidates AS (
    SELECT coalesce(l.id, s.id) AS id, coalesce(l.user_id, s.user_id) AS user_id,
           coalesce(l.namespace, s.namespace) AS namespace, coalesce(l.theme, s.theme) AS theme,
           coalesce(l.type, s.type) AS type, coalesce(l.content, s.content) AS content,
           coalesce(l.importance, s.importance) AS importance,
           coalesce(l.created_at, s.created_at) AS created_at, l.rank, s.sim
    FROM lexical l FULL JOIN semantic s ON s.id = l.id
),
bounds AS (
    SELECT min(rank) AS lo_r, max(rank) AS hi_r, count(rank) AS n_lex,
           min(sim) AS lo_s, max(sim) AS hi_s, count(sim) AS n_sem
    FROM candidates
),
scored AS (
    SELECT c.*, c.rank IS NOT NULL AS fts, c.sim IS NOT NULL AS semantic, b.n_lex, b.n_sem,
           CASE WHEN c.rank IS NULL THEN 0.0
                WHEN b.hi_r = b.lo_r THEN 1.0
                ELSE (c.rank - b.lo_r) / (b.hi_r - b.lo_r) END AS lex_norm,
           CASE WHEN c.sim IS NULL THEN 0.0
                WHEN b.hi_s = b.lo_s THEN 1.0
                ELSE (c.sim - b.lo_s) / (b.hi_s - b.lo_s) END AS sem_norm,
           CASE WHEN b.n_sem > 0 THEN {w_sem} ELSE 0.0 END AS w_sem,
           CASE WHEN b.n_lex > 0 THEN {w_lex} ELSE 0.0 END AS w_lex
    FROM candidates c CROSS JOIN bounds b
)
SELECT s.id, s.user_id, s.namespace, s.theme, s.type, s.content, s.importance, s.created_at,
       ((s.w_sem * s.sem_norm + s.w_lex * s.lex_norm) / (s.w_sem + s.w_lex))::float8 AS score,
       s.fts, s.semantic, s.n_lex, s.n_sem
FROM scored s
ORDER BY score DESC, s.created_at DESC, s.id
LIMIT $8
"""

COUNT_READY = """
SELECT count(*) FROM (
    SELECT 1 FROM memory_items
    WHERE user_id = $1 AND embedding_state = 'ready'
    LIMIT $2
) AS r
"""

# enable_sort = off: for a user holding ~10% of the table the planner otherwise
# prefers "fetch all the user's rows, sort by distance" (measured: ~95 ms at
# 100k rows) over the HNSW walk; only the ORDER BY distance can avoid a sort.
ITERATIVE_SCAN = """
SET LOCAL enable_sort = off;
SET LOCAL hnsw.iterative_scan = relaxed_order;
SET LOCAL hnsw.ef_search = 100;
SET LOCAL hnsw.max_scan_tuples = 50000
"""


def _statement(template: str, *, scope: str, semantic: str = "", dim: int = 0) -> str:
    sem = semantic.format(scope=scope, filters=_FILTERS, k=CANDIDATES_PER_SIGNAL, dim=dim,
                          carry=_CARRY)
    return template.format(
        columns=_COLUMNS,
        scope=scope,
        filters=_FILTERS,
        lexical=_LEXICAL.format(scope=scope, filters=_FILTERS, k=CANDIDATES_PER_SIGNAL,
                                carry=_CARRY),
        semantic=sem,
        w_sem=SEMANTIC_WEIGHT,
        w_lex=LEXICAL_WEIGHT,
    )


# Named statements, built once from the fixed fragments above (no values inside).
STATEMENTS: dict[tuple[str, str], str] = {}
for _name, _scope in (("user", _USER), ("any", _ANY_USER)):
    STATEMENTS[(_name, "match_all")] = _statement(MATCH_ALL, scope=_scope)
    STATEMENTS[(_name, "lexical")] = _statement(HYBRID, scope=_scope, semantic=_NO_SEMANTIC)
    STATEMENTS[(_name, "exact")] = _statement(HYBRID, scope=_scope, semantic=_SEMANTIC_EXACT)


@functools.lru_cache(maxsize=8)
def index_statement(scope: str, dim: int) -> str:
    """The HNSW variant; the index expression names the deployment's dimension."""
    return _statement(HYBRID, scope=_USER if scope == "user" else _ANY_USER,
                      semantic=_SEMANTIC_INDEX, dim=int(dim))


@dataclass(frozen=True)
class SearchParams:
    """A validated search request."""

    query: str = ""
    limit: int = 10
    theme: str | None = None
    types: tuple[str, ...] | None = None
    recency_days: int | None = None
    status: Status = "active"
    include_superseded: bool = False
    namespace: str | None = None

    @property
    def match_all(self) -> bool:
        return self.query.strip() in ("", "*")


@dataclass(frozen=True)
class Hit:
    id: uuid.UUID
    user_id: str
    namespace: str
    theme: str
    type: str
    content: str
    importance: float
    created_at: datetime
    score: float
    fts: bool
    semantic: bool

    def as_result(self) -> dict[str, Any]:
        """The shape Nova 3.2 specifies for one search result."""
        return {
            "id": str(self.id),
            "theme": self.theme,
            "type": self.type,
            "content_snippet": snippet(self.content),
            "created_at": self.created_at.isoformat(),
            "score": round(self.score, 6),
            "signals": {"fts": self.fts, "semantic": self.semantic},
        }


@dataclass(frozen=True)
class SearchResult:
    mode: Mode
    hits: list[Hit] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "results": [h.as_result() for h in self.hits]}


def snippet(content: str, limit: int = SNIPPET_CHARS) -> str:
    return content if len(content) <= limit else content[: limit - 1].rstrip() + "…"


def validate_limit(limit: int, maximum: int = MAX_LIMIT) -> int:
    if limit < 1 or limit > maximum:
        raise InvalidRequest(f"limit must be between 1 and {maximum}, got {limit}")
    return limit


async def search(
    conn: Executor,
    params: SearchParams,
    *,
    user_id: str | None,
    vector: list[float] | None,
    all_users: bool = False,
) -> SearchResult:
    """Search one user's memories (or, with ``all_users`` and no user, everyone's).

    ``vector`` is the query embedding, or None for full-text-only."""
    if user_id is None and not all_users:
        raise InvalidRequest("a search needs a user")
    validate_limit(params.limit)
    scope = "user" if user_id is not None and not all_users else "any"
    since = (
        datetime.now(UTC) - timedelta(days=params.recency_days)
        if params.recency_days is not None
        else None
    )
    args: list[Any] = [
        user_id, params.theme, params.status,
        list(params.types) if params.types else None, since,
        params.include_superseded, params.namespace, params.limit,
    ]
    if params.match_all:
        rows = await conn.fetch(STATEMENTS[(scope, "match_all")], *args)
        return SearchResult("match_all", [_hit(r) for r in rows])
    args.append(params.query)
    if vector is None:
        rows = await conn.fetch(STATEMENTS[(scope, "lexical")], *args)
        return SearchResult("fts_only", [_hit(r) for r in rows])
    args.append(vector)
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as c:
            rows = await _semantic_search(c, scope, user_id, args)
    else:
        rows = await _semantic_search(conn, scope, user_id, args)
    return SearchResult(_mode(rows), [_hit(r) for r in rows])


async def _semantic_search(
    conn: Conn, scope: str, user_id: str | None, args: list[Any]
) -> list[asyncpg.Record]:
    if scope == "user" and not await uses_index(conn, user_id):
        return list(await conn.fetch(STATEMENTS[(scope, "exact")], *args))
    statement = index_statement(scope, len(args[9]))
    if conn.is_in_transaction():  # the caller's: a savepoint, as before
        async with conn.transaction():
            await conn.execute(ITERATIVE_SCAN)
            return list(await conn.fetch(statement, *args))
    # One round trip opens the transaction and sets the walk's parameters (SET
    # LOCAL: they end with it); then the read-only statement and COMMIT.
    await conn.execute("BEGIN;" + ITERATIVE_SCAN)
    try:
        rows = list(await conn.fetch(statement, *args))
    except BaseException:
        if not conn.is_closed() and conn.is_in_transaction():
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")
    return rows


# user -> (has more than EXACT_SCAN_MAX_ROWS ready rows, until when that answer holds).
# A user crosses the threshold rarely and either path returns correct results,
# so the probe (an index-only count of up to 5,001 rows, ~1-2 ms for a large
# user) runs at most once per user per LARGE_USER_TTL seconds in a process.
LARGE_USER_TTL = 60.0
_LARGE_USERS_MAX = 10_000
_large_users: dict[str, tuple[bool, float]] = {}


async def uses_index(conn: Conn, user_id: str | None) -> bool:
    """Whether a user's semantic search walks the HNSW index (else: exact scan)."""
    now = time.monotonic()
    cached = _large_users.get(user_id or "")
    if cached is not None and cached[1] > now:
        return cached[0]
    ready = await conn.fetchval(COUNT_READY, user_id, EXACT_SCAN_MAX_ROWS + 1)
    large = ready > EXACT_SCAN_MAX_ROWS
    if len(_large_users) >= _LARGE_USERS_MAX:
        _large_users.clear()
    _large_users[user_id or ""] = (large, now + LARGE_USER_TTL)
    return bool(large)


def _mode(rows: list[asyncpg.Record]) -> Mode:
    if not rows:
        return "hybrid"
    n_lex, n_sem = rows[0]["n_lex"], rows[0]["n_sem"]
    if n_lex and n_sem:
        return "hybrid"
    return "semantic_only" if n_sem else "fts_only"


def _hit(r: asyncpg.Record) -> Hit:
    return Hit(
        id=r["id"], user_id=r["user_id"], namespace=r["namespace"], theme=r["theme"],
        type=r["type"], content=r["content"], importance=float(r["importance"]),
        created_at=r["created_at"], score=float(r["score"]), fts=r["fts"],
        semantic=r["semantic"],
    )
