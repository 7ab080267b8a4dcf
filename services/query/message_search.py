"""Search over a user's conversation turns (``messages``): full-text, semantic, fused.

What callers may rely on:

- every statement is scoped to one user (``m.user_id = $1``); optional filters
  narrow it to a chat, an episode and a time window (``occurred_at``);
- ``fts`` ranks by ``ts_rank`` over the stored ``fts`` column, matching any of the
  query's words (stemmed, English stop words dropped); ``bm25`` ranks the same
  matches by BM25 over the user's own turns, a turn's speaker name counting as
  one of its words;
- ``semantic`` ranks ``ready`` rows by cosine distance to the query vector; a user
  with few embedded rows is scanned exactly, a large one walks the HNSW index of
  migration 0010 (``embedding::halfvec(D)``) with pgvector 0.8's iterative scan, so
  the user filter never starves the result;
- ``hybrid`` is Nova's 70/30: the top 50 of each signal united, each min-max
  normalised over that set (semantic as ``1 / (1 + distance)``),
  ``0.7 * semantic + 0.3 * lexical``;
- ``fused`` (the default) is the same min-max fusion of ``bm25`` and ``semantic``
  over the top 100 of each, weighted 0.6 / 0.4, then read in context: a turn
  inside a calendar period the query names ("in May 2023", services/query/periods.py)
  is lifted by 0.3, a short turn is scaled down (by up to 0.4, none past 20
  distinct words), a turn that ends in a question mark keeps 0.7 of its own
  score, and every turn gains a share of the best-scoring turn 1, 2 and 3 places
  before or after it in the same episode (0.5, 0.3, 0.2 of its score; 0.7 for
  the turn right after a question), so the answer next to the matching question
  is found, and neighbours of strong hits are returned; its score is divided by
  the largest it could reach, so it stays in [0, 1] (a turn found only as a
  neighbour has no signal set);
  ``rrf`` fuses ``fts`` and
  ``semantic`` by reciprocal rank, ``Σ 1 / (60 + rank)`` (docs/retrieval.md has
  the measurements behind each choice);
- with no query vector (no embedder, or it failed) a mode that needs one falls
  back to its lexical side alone and says so (``mode`` = ``fts`` or ``bm25``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

from services.query.periods import periods
from shared.embeddings import vector_index
from shared.errors import InvalidRequest

Mode = Literal["fused", "hybrid", "rrf", "fts", "bm25", "semantic"]
MODES: tuple[Mode, ...] = ("fused", "hybrid", "rrf", "fts", "bm25", "semantic")
DEFAULT_MODE: Mode = "fused"

MAX_LIMIT = 50
CANDIDATES = 100
SNIPPET_CHARS = 400
RRF_K = 60.0


@dataclass(frozen=True)
class Fusion:
    """How the two candidate lists become one score: ``candidates`` of each."""

    kind: Literal["minmax", "rrf"]
    w_sem: float
    w_lex: float
    lexical: Literal["ts_rank", "bm25"] = "ts_rank"
    candidates: int = CANDIDATES
    # the share of a neighbour's score 1, 2, ... turns away; () = none
    neighbours: tuple[float, ...] = ()
    # added to a turn inside a period the query names; 0 = dates not read
    date_lift: float = 0.0
    # the share of its own score a turn that ends in a question mark keeps, and the
    # share of it the turn right after it gains (instead of neighbours[0])
    question_keeps: float = 1.0
    answer_share: float = 0.0
    # a turn's score is scaled by 1 - short + short * min(1, lexemes / full_length):
    # a turn with few words loses up to `short` of it; 0 = length not read
    short: float = 0.0
    full_length: int = 20


FUSIONS: dict[Mode, Fusion] = {
    # the default: BM25 (speaker included) and cosine, min-max, 0.6 / 0.4
    "fused": Fusion(
        "minmax",
        0.4,
        0.6,
        "bm25",
        neighbours=(0.5, 0.3, 0.2),
        date_lift=0.3,
        question_keeps=0.7,
        answer_share=0.7,
        short=0.4,
        full_length=20,
    ),
    "hybrid": Fusion("minmax", 0.7, 0.3, "ts_rank", 50),  # Nova 3.2 as specified: top 50 each
    "rrf": Fusion("rrf", 1.0, 1.0),
    "fts": Fusion("minmax", 0.0, 1.0),
    "bm25": Fusion("minmax", 0.0, 1.0, "bm25"),
    "semantic": Fusion("minmax", 1.0, 0.0),
}

# $1 user, $2 query text (NULL = no lexical side), $3 query vector (NULL = no
# semantic side), $4 chat, $5 episode, $6 since, $7 until, $8 limit,
# $9 fusion ('minmax' | 'rrf'), $10 semantic weight, $11 lexical weight,
# $12 candidates taken from each signal, $13 / $14 starts / ends of the periods the
# query names, $15 the lift of a turn inside one, $16 the neighbours' shares,
# $17 the share a question keeps, $18 the share its answer gains, $19 / $20 how
# much a short turn loses and the length (distinct lexemes) past which none is lost.
_FILTERS = """
          AND ($4::text IS NULL OR m.chat_id = $4)
          AND ($5::uuid IS NULL OR m.episode_id = $5)
          AND ($6::timestamptz IS NULL OR m.occurred_at >= $6)
          AND ($7::timestamptz IS NULL OR m.occurred_at < $7)"""

_LEXICAL_TS_RANK = """
lexical AS (
    SELECT l.id, l.rank, row_number() OVER (ORDER BY l.rank DESC, l.id) AS pos
    FROM (
        SELECT m.id, ts_rank(m.fts, q.tsq)::float8 AS rank
        FROM messages m, q
        WHERE m.user_id = $1 AND q.tsq IS NOT NULL AND m.fts @@ q.tsq {filters}
        ORDER BY rank DESC, m.id
        LIMIT $12
    ) AS l
)"""

# BM25 (k1 = 1.2, b = 0.5) over the user's own turns, each turn's document being
# its content plus its speaker's name (so "what did Ann say about ..." prefers
# Ann's turns). Document length is the number of distinct lexemes.
_LEXICAL_BM25 = """
doc AS (
    SELECT m.id, m.fts || to_tsvector('english', coalesce(m.display_name, '')) AS v
    FROM messages m
    WHERE m.user_id = $1 {filters}
),
corpus AS (
    SELECT count(*)::float8 AS n, greatest(avg(length(v)), 1)::float8 AS avgdl FROM doc
),
terms AS (
    SELECT t.lexeme, count(d.id)::float8 AS df
    FROM (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', $2::text)))
          AS lexeme) AS t
    JOIN doc d ON d.v @@ quote_literal(t.lexeme)::tsquery
    GROUP BY t.lexeme
),
lexical AS (
    SELECT l.id, l.rank, row_number() OVER (ORDER BY l.rank DESC, l.id) AS pos
    FROM (
        SELECT d.id,
               sum(ln(1 + (c.n - t.df + 0.5) / (t.df + 0.5))
                   * u.tf * 2.2 / (u.tf + 1.2 * (0.5 + 0.5 * length(d.v) / c.avgdl))
               )::float8 AS rank
        FROM doc d CROSS JOIN corpus c,
             LATERAL (SELECT x.lexeme, coalesce(cardinality(x.positions), 1) AS tf
                      FROM unnest(d.v) AS x) AS u
             JOIN terms t ON t.lexeme = u.lexeme
        GROUP BY d.id
        ORDER BY rank DESC, d.id
        LIMIT $12
    ) AS l
)"""

# Exact: "+ 0" keeps the planner off the HNSW index, so every one of the user's
# rows is compared (used when the user has few rows).
_SEMANTIC_EXACT = """
    semantic AS (
        SELECT m.id, 1.0 / (1.0 + (m.embedding <=> $3::vector)) AS sim,
               row_number() OVER (ORDER BY (m.embedding <=> $3::vector) + 0, m.id) AS pos
        FROM messages m
        WHERE m.user_id = $1 AND $3::vector IS NOT NULL
          AND m.embedding_state = 'ready' AND m.embedding IS NOT NULL {filters}
        ORDER BY (m.embedding <=> $3::vector) + 0, m.id
        LIMIT $12
    )"""

# Index: ordered by the indexed expression, and naming the partial index's
# predicate (vector_indexed: users listed for the index, migration 0050), so the
# HNSW walk is used; the caller sets hnsw.iterative_scan so the walk goes on until
# k of this user's rows pass the filter. The score uses the full-precision distance.
_SEMANTIC_INDEX = """
    semantic AS MATERIALIZED (
        SELECT w.id, w.sim, row_number() OVER (ORDER BY w.walk, w.id) AS pos
        FROM (
            SELECT m.id, 1.0 / (1.0 + (m.embedding <=> $3::vector)) AS sim,
                   m.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim}) AS walk
            FROM messages m
            WHERE m.user_id = $1 AND m.vector_indexed AND m.embedding_state = 'ready' {filters}
            ORDER BY m.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim})
            LIMIT $12
        ) AS w
    )"""

SEARCH = """
WITH q AS (
    -- any of the query's words (stemmed, stop words dropped); more matches rank higher
    SELECT nullif(array_to_string(ARRAY(
               SELECT quote_literal(w)
               FROM unnest(tsvector_to_array(to_tsvector('english', $2::text))) AS w
           ), ' | '), '')::tsquery AS tsq
),
{lexical},
{semantic},
candidates AS (
    SELECT id, max(rank) AS rank, max(lex_pos) AS lex_pos, max(sim) AS sim,
           max(sem_pos) AS sem_pos
    FROM (SELECT id, rank, pos AS lex_pos, NULL::float8 AS sim, NULL::bigint AS sem_pos
          FROM lexical
          UNION ALL
          SELECT id, NULL, NULL, sim, pos FROM semantic) AS c
    GROUP BY id
),
bounds AS (
    SELECT min(rank) AS lo_r, max(rank) AS hi_r, count(rank) AS n_lex,
           min(sim) AS lo_s, max(sim) AS hi_s, count(sim) AS n_sem
    FROM candidates
),
scored AS (
    SELECT c.*, b.n_lex, b.n_sem,
           -- a signal with no candidate at all gets no weight, so scores stay in [0, 1]
           CASE WHEN b.n_sem > 0 THEN $10::float8 ELSE 0.0 END AS w_sem,
           CASE WHEN b.n_lex > 0 THEN $11::float8 ELSE 0.0 END AS w_lex,
           CASE WHEN c.rank IS NULL THEN 0.0
                WHEN b.hi_r = b.lo_r THEN 1.0
                ELSE (c.rank - b.lo_r) / (b.hi_r - b.lo_r) END AS lex_norm,
           CASE WHEN c.sim IS NULL THEN 0.0
                WHEN b.hi_s = b.lo_s THEN 1.0
                ELSE (c.sim - b.lo_s) / (b.hi_s - b.lo_s) END AS sem_norm
    FROM candidates c CROSS JOIN bounds b
),
fused AS (
    SELECT s.*,
           CASE WHEN s.w_sem + s.w_lex = 0 THEN 0.0
                WHEN $9::text = 'rrf' THEN
                    (s.w_sem * coalesce(1.0 / ({rrf_k} + s.sem_pos), 0.0)
                     + s.w_lex * coalesce(1.0 / ({rrf_k} + s.lex_pos), 0.0))
                    / ((s.w_sem + s.w_lex) / ({rrf_k} + 1.0))
                ELSE (s.w_sem * s.sem_norm + s.w_lex * s.lex_norm) / (s.w_sem + s.w_lex)
           END::float8 AS score
    FROM scored s
    -- a list given no weight contributes no candidates either
    WHERE (s.w_sem > 0 AND s.sim IS NOT NULL) OR (s.w_lex > 0 AND s.rank IS NOT NULL)
),
dated AS (
    -- a turn inside a period the query names is lifted; a short one is scaled down
    SELECT f.*, m.episode_id, m.occurred_at, m.content ~ '\\?\\s*$' AS asks,
           (f.score + CASE WHEN EXISTS (
               SELECT 1 FROM unnest($13::timestamptz[], $14::timestamptz[]) AS p(lo, hi)
               WHERE m.occurred_at >= p.lo AND m.occurred_at < p.hi
           ) THEN $15::float8 ELSE 0.0 END)
           * (1.0 - $19::float8 + $19::float8 * least(1.0, length(m.fts)::float8 / $20::float8))
           AS lifted
    FROM fused f JOIN messages m ON m.id = f.id AND m.user_id = $1
),
near AS (
    -- the turns up to cardinality($16) places before and after each candidate in
    -- its episode (messages_episode_order_idx), with their distance to it and the
    -- part of its score they gain: the turn right after a question gains $18
    SELECT n.id, n.dist,
           CASE WHEN n.after AND n.dist = 1 AND d.asks
                THEN greatest($18::float8, ($16::float8[])[1])
                ELSE ($16::float8[])[n.dist] END * d.lifted AS part
    FROM dated d CROSS JOIN LATERAL (
        SELECT b.id, false AS after,
               row_number() OVER (ORDER BY b.occurred_at DESC, b.id DESC) AS dist
        FROM (SELECT m.id, m.occurred_at FROM messages m
              WHERE m.episode_id = d.episode_id AND m.user_id = $1
                AND (m.occurred_at, m.id) < (d.occurred_at, d.id) {filters}
              ORDER BY m.occurred_at DESC, m.id DESC
              LIMIT cardinality($16::float8[])) AS b
        UNION ALL
        SELECT a.id, true, row_number() OVER (ORDER BY a.occurred_at, a.id) AS dist
        FROM (SELECT m.id, m.occurred_at FROM messages m
              WHERE m.episode_id = d.episode_id AND m.user_id = $1
                AND (m.occurred_at, m.id) > (d.occurred_at, d.id) {filters}
              ORDER BY m.occurred_at, m.id
              LIMIT cardinality($16::float8[])) AS a
    ) AS n
),
smoothed AS (
    -- own score (a question keeps $17 of it) plus, per distance, the better of the
    -- two neighbours' parts
    SELECT c.id, sum(c.part) AS score
    FROM (SELECT id, CASE WHEN asks THEN $17::float8 ELSE 1.0 END * lifted AS part FROM dated
          UNION ALL
          SELECT id, max(part) FROM near GROUP BY id, dist) AS c
    GROUP BY c.id
),
ceiling AS (
    -- the largest score a turn could reach, so scores stay in [0, 1]
    SELECT 1.0 + CASE WHEN cardinality($13::timestamptz[]) > 0 THEN $15::float8 ELSE 0.0 END
               + coalesce((SELECT sum(w) FROM unnest($16::float8[]) AS w), 0.0)
               + CASE WHEN cardinality($16::float8[]) > 0
                      THEN greatest($18::float8 - ($16::float8[])[1], 0.0) ELSE 0.0 END AS top
)
SELECT m.id, m.external_id, m.episode_id, m.chat_id, m.role, m.display_name, m.content,
       m.occurred_at, (s.score / c.top)::float8 AS score, d.rank AS lex_rank,
       d.sim AS similarity, d.lex_pos, d.sem_pos
FROM smoothed s CROSS JOIN ceiling c
     JOIN messages m ON m.id = s.id AND m.user_id = $1
     LEFT JOIN dated d ON d.id = s.id
ORDER BY s.score DESC, m.occurred_at DESC, m.id
LIMIT $8
"""


# As in services/query/search.py: enable_sort off, or the planner sorts all of a
# big user's rows instead of walking the graph.
ITERATIVE_SCAN = """
SET LOCAL enable_sort = off;
SET LOCAL hnsw.iterative_scan = relaxed_order;
SET LOCAL hnsw.ef_search = 200;
SET LOCAL hnsw.max_scan_tuples = 50000
"""


_LEXICAL = {"ts_rank": _LEXICAL_TS_RANK, "bm25": _LEXICAL_BM25}


def _statement(lexical: str, semantic: str, dim: int = 0) -> str:
    return SEARCH.format(
        filters=_FILTERS,
        rrf_k=RRF_K,
        lexical=_LEXICAL[lexical].format(filters=_FILTERS),
        semantic=semantic.format(filters=_FILTERS, dim=dim),
    )


# Named statements, built once from the fixed fragments above (no values inside).
EXACT = {name: _statement(name, _SEMANTIC_EXACT) for name in _LEXICAL}


@functools.lru_cache(maxsize=8)
def index_statement(lexical: str, dim: int) -> str:
    """The HNSW variant; the index expression names the deployment's dimension."""
    return _statement(lexical, _SEMANTIC_INDEX, int(dim))


@dataclass(frozen=True)
class MessageQuery:
    """A validated message search."""

    query: str
    limit: int = 10
    mode: Mode = DEFAULT_MODE
    chat_id: str | None = None
    episode_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if not self.query.strip():
            raise InvalidRequest("a message search needs a query")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}, got {self.limit}")
        if self.mode not in MODES:
            raise InvalidRequest(f"mode must be one of {', '.join(MODES)}")


@dataclass(frozen=True)
class MessageHit:
    id: int
    external_message_id: str | None
    episode_id: str
    chat_id: str
    role: str
    display_name: str | None
    content: str
    occurred_at: datetime
    score: float
    lexical_rank: int | None
    semantic_rank: int | None
    similarity: float | None

    def as_result(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "external_message_id": self.external_message_id,
            "episode_id": self.episode_id,
            "chat_id": self.chat_id,
            "role": self.role,
            "display_name": self.display_name,
            "occurred_at": self.occurred_at.isoformat(),
            "content_snippet": snippet(self.content),
            "score": round(self.score, 6),
            "signals": {
                "fts": self.lexical_rank is not None,
                "semantic": self.semantic_rank is not None,
                "fts_rank": self.lexical_rank,
                "semantic_rank": self.semantic_rank,
                "similarity": None if self.similarity is None else round(self.similarity, 4),
            },
        }


@dataclass(frozen=True)
class MessageResult:
    mode: Mode
    hits: list[MessageHit] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "results": [h.as_result() for h in self.hits]}


def snippet(content: str, limit: int = SNIPPET_CHARS) -> str:
    return content if len(content) <= limit else content[: limit - 1].rstrip() + "…"


async def search_messages(
    pool: asyncpg.Pool, q: MessageQuery, *, user_id: str, vector: list[float] | None
) -> MessageResult:
    """Search ``user_id``'s turns. ``vector`` is the query embedding, or None
    (full-text only)."""
    mode: Mode = q.mode
    if vector is None and FUSIONS[mode].w_sem > 0:
        mode = "bm25" if FUSIONS[mode].lexical == "bm25" else "fts"
    fusion = FUSIONS[mode]
    named = periods(q.query) if fusion.date_lift > 0 else []
    args: list[Any] = [
        user_id,
        q.query if fusion.w_lex > 0 else None,
        vector if fusion.w_sem > 0 else None,
        q.chat_id,
        q.episode_id,
        q.since,
        q.until,
        q.limit,
        fusion.kind,
        fusion.w_sem,
        fusion.w_lex,
        max(fusion.candidates, q.limit),
        [lo for lo, _ in named],
        [hi for _, hi in named],
        fusion.date_lift,
        list(fusion.neighbours),
        fusion.question_keeps,
        fusion.answer_share,
        fusion.short,
        float(fusion.full_length),
    ]
    async with pool.acquire() as conn:
        rows = await _fetch(conn, user_id, fusion.lexical, args)
    return MessageResult(mode, [_hit(r) for r in rows])


async def _fetch(conn: Any, user_id: str, lexical: str, args: list[Any]) -> list[asyncpg.Record]:
    vector = args[2]
    if vector is None:
        return list(await conn.fetch(EXACT[lexical], *args))
    # Only users with many embedded turns are in the HNSW index (the embedder lists
    # them: shared/embeddings/vector_index.py); everyone else is compared exactly.
    if not await vector_index.uses_index(conn, user_id, "message"):
        return list(await conn.fetch(EXACT[lexical], *args))
    async with conn.transaction():
        await conn.execute(ITERATIVE_SCAN)
        return list(await conn.fetch(index_statement(lexical, len(vector)), *args))


def _hit(r: asyncpg.Record) -> MessageHit:
    return MessageHit(
        id=int(r["id"]),
        external_message_id=r["external_id"],
        episode_id=str(r["episode_id"]),
        chat_id=r["chat_id"],
        role=r["role"],
        display_name=r["display_name"],
        content=r["content"],
        occurred_at=r["occurred_at"],
        score=float(r["score"]),
        lexical_rank=None if r["lex_pos"] is None else int(r["lex_pos"]),
        semantic_rank=None if r["sem_pos"] is None else int(r["sem_pos"]),
        similarity=None if r["similarity"] is None else float(r["similarity"]),
    )
