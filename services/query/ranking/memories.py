"""Hybrid memory search (Nova 3.2): PostgreSQL full-text + pgvector cosine, 30/70.

The candidate generators of ``memory_items`` for the ``NOVA`` spec (``fusion.py``);
the score is ``fusion.fuse``. The API's ``/v1/memory/search``, the tools, the
browser's search box, admin search and the request/reply search all come here
(through ``services.query.memory.search.memory_search``).

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

For a user searched exactly (the common case) both signals are read by one
statement, ``BOTH_EXACT`` (one round trip). Otherwise each signal is its own
statement; given a pool, both run at the same time on two connections (a search
costs the slower of the two, not their sum). The union is scored by ``fusion.fuse``.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg

from services.query.embeddings.query import lists_newest
from services.query.ranking.fusion import NOVA, NOVA_RELEVANT, Candidate, RankSpec, fuse, ranked
from services.query.ranking.sql import hnsw_walk, or_tsquery
from shared.db import Conn, Executor
from shared.embeddings import vector_index
from shared.errors import InvalidRequest
from shared.text import clip

Mode = Literal["hybrid", "fts_only", "semantic_only", "match_all"]
Status = Literal["active", "archived", "any"]

CANDIDATES_PER_SIGNAL = NOVA.candidates
MAX_LIMIT = 50
SNIPPET_CHARS = 280

# $1 user ($1 NULL = every user, admin only), $2 theme, $3 status, $4 types,
# $5 created since, $6 include superseded, $7 namespace, then $8: the limit
# (match-all), the query text (lexical) or the query vector (semantic).
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
_COLUMNS = (
    "m.id, m.user_id, m.namespace, m.theme, m.type, m.content, m.importance, m.created_at, "
    "m.last_accessed_at"
)

MATCH_ALL = """
SELECT {columns}
FROM memory_items m
WHERE {scope} {filters}
ORDER BY m.created_at DESC, m.id
LIMIT $8
"""

# The top K by ``ts_rank`` of rows matching any of the query's words (stemmed,
# stop words dropped); ``q`` builds the tsquery once, not per row. Every match is
# ranked, carrying only what the order needs; the K winners' columns are read
# after (a 5,000-match query: p95 17 -> 13 ms, same rows and order).
LEXICAL = f"""
WITH q AS MATERIALIZED (
    SELECT {or_tsquery("$8")} AS tsq,
           memory_user_lexemes($1, NULL, $8::text) AS keys
),
top AS MATERIALIZED (
    SELECT m.user_id, m.id, m.created_at, ts_rank(m.fts, q.tsq)::float8 AS rank
    FROM memory_items m, q
    WHERE {{match}} {{filters}}
    ORDER BY rank DESC, m.created_at DESC, m.id
    LIMIT {{k}}
)
SELECT {{columns}}, top.rank
FROM top JOIN memory_items m ON m.user_id = top.user_id AND m.id = top.id
WHERE top.rank > 0
ORDER BY top.rank DESC, top.created_at DESC, top.id
"""
# How a row matches. One user's: the query's words as that user's keys (the same
# function as memory_items_user_lexemes_idx, migration 0022), so the index returns only
# their rows; the user is checked on each row as a filter ("IS TRUE" keeps the
# planner from AND-ing the bitmap with the user_id b-tree: for a 100k-item user,
# a 100,000-entry scan), and a row a hash collision lets in has rank 0 and is
# dropped above. Across users (admin): the words themselves, in (user_id, fts).
_MATCH = {
    "user": "memory_user_lexemes(m.user_id, m.key, m.content) && q.keys "
    "AND (m.user_id = $1) IS TRUE",
    "any": f"{_ANY_USER} AND m.fts @@ q.tsq",
}

# Exact: "+ 0" keeps the planner off the HNSW index, so every row of the
# user's is compared (used when the user has few rows).
SEMANTIC_EXACT = """
SELECT {columns}, (m.embedding <=> $8::vector)::float8 AS dist
FROM memory_items m
WHERE {scope} AND m.embedding_state = 'ready' AND m.embedding IS NOT NULL {filters}
ORDER BY (m.embedding <=> $8::vector) + 0, m.id
LIMIT {k}
"""

# Index: the HNSW index (migration 0050) is on embedding::halfvec(D) of the rows
# marked vector_indexed (those of users listed for it: shared/embeddings/
# vector_index.py), so the walk orders by that expression and names the mark;
# with hnsw.iterative_scan (set by the caller) it keeps walking until enough of
# this user's rows pass the filter. The score still uses the full-precision distance.
SEMANTIC_INDEX = """
SELECT {columns}, (m.embedding <=> $8::vector)::float8 AS dist
FROM memory_items m
WHERE {scope} AND m.vector_indexed AND m.embedding_state = 'ready' {filters}
ORDER BY m.embedding::halfvec({dim}) <=> $8::vector::halfvec({dim})
LIMIT {k}
"""

# Across users (admin): the index for listed users' rows, every other row exactly.
_UNINDEXED_EXACT = SEMANTIC_EXACT.replace(
    "WHERE {scope} AND", "WHERE {scope} AND NOT m.vector_indexed AND"
)
SEMANTIC_ANY = f"""
SELECT * FROM (
    ({SEMANTIC_INDEX})
    UNION ALL
    ({_UNINDEXED_EXACT})
) AS both_paths
ORDER BY dist, id
LIMIT {{k}}
"""

# Both signals of a user searched exactly (fewer rows than the index threshold: the
# common case) in one statement: one connection and one round trip instead of two
# statements on two connections at the same time. Each arm is the statement above,
# unchanged, numbered in its own order ($8 the query text, $9 the vector), so the
# candidates and their order are those of the two statements.
BOTH_EXACT = """
SELECT 0 AS signal, row_number() OVER (ORDER BY l.rank DESC, l.created_at DESC, l.id) AS pos,
       l.*, NULL::float8 AS dist
FROM ({lexical}) AS l
UNION ALL
SELECT 1, row_number() OVER (ORDER BY s.dist, s.id), {plain_columns}, NULL::float8, s.dist
FROM ({semantic}) AS s
ORDER BY signal, pos
"""

_SCOPES = {"user": _USER, "any": _ANY_USER}


def _statement(template: str, scope: str, dim: int = 0) -> str:
    return template.format(
        columns=_COLUMNS,
        scope=_SCOPES[scope],
        match=_MATCH[scope],
        filters=_FILTERS,
        k=CANDIDATES_PER_SIGNAL,
        dim=dim,
    )


# Named statements, built once from the fixed fragments above (no values inside).
STATEMENTS: dict[tuple[str, str], str] = {
    (scope, name): _statement(template, scope)
    for scope in _SCOPES
    for name, template in (
        ("match_all", MATCH_ALL),
        ("lexical", LEXICAL),
        ("exact", SEMANTIC_EXACT),
    )
}
STATEMENTS[("user", "both_exact")] = BOTH_EXACT.format(
    lexical=STATEMENTS[("user", "lexical")],
    semantic=STATEMENTS[("user", "exact")].replace("$8", "$9"),
    plain_columns=", ".join(f"s.{c.removeprefix('m.')}" for c in _COLUMNS.split(", ")),
)


@functools.lru_cache(maxsize=8)
def index_statement(scope: str, dim: int) -> str:
    """The HNSW variant; the index expression names the deployment's dimension."""
    return _statement(SEMANTIC_INDEX if scope == "user" else SEMANTIC_ANY, scope, int(dim))


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
    relevant_only: bool = False
    """Only matches relevant by the context's rule (``NOVA_RELEVANT``): the browser's."""

    @property
    def spec(self) -> RankSpec:
        return NOVA_RELEVANT if self.relevant_only else NOVA

    @property
    def match_all(self) -> bool:
        return lists_newest(self.query)


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
            "content_snippet": clip(self.content, SNIPPET_CHARS),
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

    ``vector`` is the query embedding, or None for full-text-only. Given a pool,
    the two signals are read at the same time on two connections."""
    if user_id is None and not all_users:
        raise InvalidRequest("a search needs a user")
    validate_limit(params.limit)
    scope = "user" if user_id is not None and not all_users else "any"
    since = (
        datetime.now(UTC) - timedelta(days=params.recency_days)
        if params.recency_days is not None
        else None
    )
    filters: list[Any] = [
        user_id,
        params.theme,
        params.status,
        list(params.types) if params.types else None,
        since,
        params.include_superseded,
        params.namespace,
    ]
    if params.match_all:
        rows = await conn.fetch(STATEMENTS[(scope, "match_all")], *filters, params.limit)
        return SearchResult("match_all", [_hit(r, 0.0, False, False) for r in rows])
    lexical_sql = STATEMENTS[(scope, "lexical")]
    if vector is None:
        return fuse_hits(
            list(await conn.fetch(lexical_sql, *filters, params.query)),
            [],
            params.limit,
            spec=params.spec,
        )
    if scope == "user" and not await uses_index(conn, user_id):
        both = await conn.fetch(STATEMENTS[(scope, "both_exact")], *filters, params.query, vector)
        return fuse_hits(
            [r for r in both if r["signal"] == 0],
            [r for r in both if r["signal"] == 1],
            params.limit,
            spec=params.spec,
        )
    if isinstance(conn, asyncpg.Pool):
        pool = conn

        async def lexical() -> list[asyncpg.Record]:
            async with pool.acquire() as c:
                return list(await c.fetch(lexical_sql, *filters, params.query))

        async def semantic() -> list[asyncpg.Record]:
            async with pool.acquire() as c:
                return await semantic_candidates(c, scope, user_id, filters, vector)

        # Each task holds one connection at a time, so a busy pool cannot deadlock.
        lex, sem = await asyncio.gather(lexical(), semantic())
    else:
        lex = list(await conn.fetch(lexical_sql, *filters, params.query))
        sem = await semantic_candidates(conn, scope, user_id, filters, vector)
    return fuse_hits(lex, sem, params.limit, spec=params.spec)


async def semantic_candidates(
    conn: Conn, scope: str, user_id: str | None, filters: list[Any], vector: list[float]
) -> list[asyncpg.Record]:
    """The top K rows by cosine distance, by the HNSW walk: ``search`` has already read
    whether the user is searched exactly (then ``BOTH_EXACT`` reads both signals), so it
    is not asked again here."""
    async with hnsw_walk(conn) as c:
        return list(await c.fetch(index_statement(scope, len(vector)), *filters, vector))


def fuse_hits(
    lexical: list[asyncpg.Record],
    semantic: list[asyncpg.Record],
    limit: int,
    *,
    spec: RankSpec = NOVA,
) -> SearchResult:
    """Nova's hybrid score over the union of both signals' candidates (``NOVA``, or
    ``NOVA_RELEVANT``: the same, only the relevant candidates).

    Each signal is min-max normalised over its candidates (a row the other
    signal found but this one did not scores 0 on it), then
    ``score = 0.7 * semantic + 0.3 * lexical``; a signal with no candidate at
    all drops out, so the other alone scores in [0, 1]. Ties: newer, then id."""
    if lexical and semantic:
        mode: Mode = "hybrid"
    elif semantic:
        mode = "semantic_only"
    elif lexical:
        mode = "fts_only"
    else:
        return SearchResult("hybrid")
    rows = {r["id"]: r for r in (*semantic, *lexical)}
    cands = {
        k: Candidate(
            k,
            importance=float(r["importance"]),
            last_read=r["last_accessed_at"] or r["created_at"],
        )
        for k, r in rows.items()
    }
    for pos, r in enumerate(lexical, 1):
        cands[r["id"]].rank, cands[r["id"]].lex_pos = float(r["rank"]), pos
    for pos, r in enumerate(semantic, 1):
        cands[r["id"]].distance, cands[r["id"]].sem_pos = float(r["dist"]), pos
    best = ranked(
        spec,
        fuse(spec, cands.values()),
        limit,
        tie=lambda c: (-rows[c.id]["created_at"].timestamp(), c.id),
    )
    return SearchResult(
        mode,
        [_hit(rows[c.id], c.score, c.lex_pos is not None, c.sem_pos is not None) for c in best],
    )


async def uses_index(conn: Executor, user_id: str | None) -> bool:
    """Whether a user's semantic search walks the HNSW index (else: exact scan).

    Only users with more embedded memories than the exact scan handles well are
    in the index (shared/embeddings/vector_index.py); the rest are scanned exactly."""
    return user_id is not None and await vector_index.uses_index(conn, user_id, "memory")


def _hit(r: asyncpg.Record, score: float, fts: bool, semantic: bool) -> Hit:
    return Hit(
        id=r["id"],
        user_id=r["user_id"],
        namespace=r["namespace"],
        theme=r["theme"],
        type=r["type"],
        content=r["content"],
        importance=float(r["importance"]),
        created_at=r["created_at"],
        score=score,
        fts=fts,
        semantic=semantic,
    )
