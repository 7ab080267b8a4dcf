"""Search over a user's conversation turns (``messages``): candidates, then ``fuse``.

What callers may rely on:

- every statement is scoped to one user (``m.user_id = $1``); optional filters
  narrow it to a chat, an episode and a time window (``occurred_at``);
- lexical candidates: ``ts_rank`` over the stored ``fts`` column, or BM25 over the
  user's own turns (k1 = 1.2, b = 0.5), a turn's speaker name counting as one
  of its words; both match any of the query's words (``sql.or_tsquery``). For a
  user in the HNSW index searched with no filter, BM25 reads only the postings
  of the query's words (``message_postings``, migration 0180), the rest of its
  statistics kept per user and speaker (``message_text_stats``, migration 0090);
- semantic candidates: ``ready`` rows by cosine distance to the query vector; a
  user with few embedded rows is scanned exactly, a large one walks the HNSW
  index of migration 0010 (``embedding::halfvec(D)``, ``sql.hnsw_walk``), so
  the user filter never starves the result;
- each candidate comes with where it is: its episode's turns up to three places
  before and after it (``messages_episode_order_idx``, same filters), whether it
  asks a question, its length, whether it lies in a period the query names;
- the score is ``fusion.fuse`` under the surface's ``RankSpec`` (``fusion.py``):
  ``MESSAGE_MODES`` for ``/v1/messages/search`` (``fused`` the default),
  ``CONTEXT_TURNS`` for ``/v1/context``;
- with no query vector (no embedder, or it failed) a mode that needs one falls
  back to its lexical side alone and says so (``mode`` = ``fts`` or ``bm25``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Self

import asyncpg
from pydantic import BaseModel
from pydantic.json_schema import SkipJsonSchema

from services.query.embeddings.query import lists_newest
from services.query.ranking.fusion import (
    MESSAGE_MODES,
    Candidate,
    MessageMode,
    RankSpec,
    answer_of,
    asks_assistant,
    fuse,
    ranked,
)
from services.query.ranking.sql import hnsw_walk, memory_valid, or_tsquery
from shared.dates import around_event, event_anchors, periods, relative
from shared.db import Executor
from shared.embeddings import vector_index
from shared.errors import InvalidRequest
from shared.text import clip

Mode = MessageMode
MODES: tuple[Mode, ...] = tuple(MESSAGE_MODES)
DEFAULT_MODE: Mode = "fused"
FUSIONS = MESSAGE_MODES

MAX_LIMIT = 50
SNIPPET_CHARS = 400
EF_SEARCH = 200

# $1 user, $2 query text (NULL = no lexical side), $3 query vector (NULL = no
# semantic side), $4 chat, $5 episode, $6 since, $7 until, $8 candidates per
# signal, $9 neighbours read on each side, $10 / $11 starts / ends of the periods
# the query names.
_FILTERS = """
          AND ($4::text IS NULL OR m.chat_id = $4)
          AND ($5::uuid IS NULL OR m.episode_id = $5)
          AND ($6::timestamptz IS NULL OR m.occurred_at >= $6)
          AND ($7::timestamptz IS NULL OR m.occurred_at < $7)"""

# BM25 (k1 = 1.2, b = 0.5) of the turns in ``hit`` (id, dl: the turn's length in
# distinct words, lexeme, tf), given ``terms`` (lexeme, df) and ``corpus`` (n, avgdl):
# the one formula every BM25 statement below ends in.
# A document is a turn, or a passage of one (``part``: the passage's idx) when
# passages are read; a turn scores its best document's.
# Each word's weight (idf) is computed once, not once per posting read.
_BM25_SCORE = """sum(w.idf
                       * h.tf * 2.2 / (h.tf + 1.2 * (0.5 + 0.5 * h.dl / w.avgdl)))::float8"""
_BM25_WEIGHTS = """weights AS MATERIALIZED (
    SELECT t.lexeme, ln(1 + (c.n - t.df + 0.5) / (t.df + 0.5)) AS idf, c.avgdl
    FROM terms t CROSS JOIN corpus c
),
"""
_BM25_RANKED = (
    _BM25_WEIGHTS
    + """lexical AS (
    SELECT l.id, l.rank, row_number() OVER (ORDER BY l.rank DESC, l.id) AS pos
    FROM (
        SELECT d.id, max(d.rank) AS rank
        FROM (
            SELECT h.id, """
    + _BM25_SCORE
    + """ AS rank
            FROM hit h JOIN weights w USING (lexeme)
            GROUP BY h.id, h.part
        ) AS d
        GROUP BY d.id
        ORDER BY rank DESC, d.id
        LIMIT $8
    ) AS l
)"""
)
# ... where a turn is its one document (no passages read): one aggregation, not two
# (~1 ms of a long question's 30,000 postings).
_BM25_RANKED_TURNS = (
    _BM25_WEIGHTS
    + """lexical AS (
    SELECT l.id, l.rank, row_number() OVER (ORDER BY l.rank DESC, l.id) AS pos
    FROM (
        SELECT h.id, """
    + _BM25_SCORE
    + """ AS rank
        FROM hit h JOIN weights w USING (lexeme)
        GROUP BY h.id
        ORDER BY rank DESC, h.id
        LIMIT $8
    ) AS l
)"""
)

# BM25's documents: a user's turns, each its content plus its speaker's name.
_BM25_TURNS = """
doc AS (
    SELECT m.id, 0 AS part, m.fts || to_tsvector('english', coalesce(m.display_name, '')) AS v
    FROM messages m
    WHERE m.user_id = $1 {filters}
),"""

# ... or, a long turn, its passages (migration 0160), each with its speaker's name.
_BM25_PASSAGES = """
doc AS (
    SELECT m.id, 0 AS part, m.fts || to_tsvector('english', coalesce(m.display_name, '')) AS v
    FROM messages m
    WHERE m.user_id = $1 {filters}
      AND NOT EXISTS (SELECT 1 FROM message_passages p
                        WHERE p.user_id = m.user_id AND p.message_id = m.id)
    UNION ALL
    SELECT m.id, p.idx, p.fts || to_tsvector('english', coalesce(m.display_name, ''))
    FROM message_passages p JOIN messages m ON m.id = p.message_id AND m.user_id = $1
    WHERE p.user_id = $1 {filters}
),"""

_BM25 = """
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
hit AS (
    SELECT d.id, d.part, length(d.v) AS dl, x.lexeme,
           coalesce(cardinality(x.positions), 1) AS tf
    FROM doc d, unnest(d.v) AS x
),
"""

# BM25 for a big user from the postings of the query's words (migration 0180):
# ``documents`` picks the postings of the corpus's documents (turns, or turns
# without passages and passages), ``speakers`` its counts per speaker
# (message_text_stats). A document is found when a query word is one of its own
# words (``in_text``); its postings of the query's words, its speaker's name's
# too, are its hits; a word's document frequency counts the documents holding it
# in their own words but not in their speaker's name, and every turn (passage) of
# a speaker whose name holds it.
# Each word's postings are read newest first (the primary key backwards), at most
# ``per_word`` of them: below that many a word's postings are all read and ranks
# are the full scan's; above it the word's newest ``per_word`` documents are scored,
# and its document frequency is counted from all its postings (an index-only count,
# no row read). A word in more than ``per_word`` of a user's turns weighs little
# (its idf is low); the rarer words that decide a ranking are read whole. At a
# million turns a common word is in 40,000 of them (docs/retrieval.md, "Long
# history: a common word's newest postings").
# A posting not of the speaker's name is of the document's own words (``in_text``),
# so its document is found: ``hit`` asks which documents are found (a hashed set of
# them) only for a posting of a speaker's name, so a query naming no speaker hashes
# nothing (10,000 BEAM turns, a question of 29 words: 30,558 postings;
# docs/retrieval.md, "Long history").
_BM25_STATS = """
qterms AS MATERIALIZED (
    SELECT DISTINCT w AS lexeme
    FROM unnest(tsvector_to_array(to_tsvector('english', $2::text))) AS w
),
speakers AS MATERIALIZED (
    SELECT s.speaker, {speakers}, tsvector_to_array(to_tsvector('english', s.speaker)) AS words
    FROM message_text_stats s
    WHERE s.user_id = $1
),
corpus AS MATERIALIZED (
    SELECT sum(turns)::float8 AS n,
           greatest(sum(lexemes + turns * cardinality(words)) / greatest(sum(turns), 1),
                    1)::float8 AS avgdl
    FROM speakers
),
posted AS MATERIALIZED (
    SELECT b.id, b.part, t.lexeme, b.tf, b.dl, b.by_name, b.in_text
    FROM qterms t CROSS JOIN LATERAL (
        SELECT p.message_id AS id, p.part, p.tf, p.dl, p.by_name, p.in_text
        FROM message_postings p
        WHERE p.user_id = $1 AND p.lexeme = t.lexeme AND {documents}
        ORDER BY p.message_id DESC, p.part DESC
        LIMIT {per_word}
    ) AS b
),
hit AS (
    SELECT h.id, h.part, h.dl, h.lexeme, h.tf, h.by_name
    FROM posted h
    WHERE h.in_text OR (h.id, h.part) IN (SELECT f.id, f.part FROM posted f WHERE f.in_text)
),
terms AS MATERIALIZED (
    SELECT t.lexeme,
           (CASE WHEN coalesce(r.got, 0) < {per_word} THEN coalesce(r.n, 0)
                 ELSE coalesce({counted},
                               (SELECT count(*) FROM message_postings p
                                WHERE p.user_id = $1 AND p.lexeme = t.lexeme AND NOT p.by_name
                                  AND {documents}))
            END
            + (SELECT coalesce(sum(s.turns), 0) FROM speakers s WHERE t.lexeme = ANY(s.words))
           )::float8 AS df
    FROM qterms t
         LEFT JOIN (SELECT lexeme, count(*) AS got, count(*) FILTER (WHERE NOT by_name) AS n
                    FROM posted GROUP BY lexeme) AS r USING (lexeme)
),
"""

# At most this many postings of each query word are read (``_BM25_STATS``); a word
# in more of the user's turns has its count kept by the embedder (migration 0200).
POSTINGS_PER_WORD = vector_index.POSTINGS_PER_WORD

# A word in more turns than are read: its kept count (``vector_index.count_words``) and
# the postings written since, the newest end of the word's postings; NULL when the
# word has no count kept (the search counts all its postings).
_COUNTED = """(SELECT c.turns + (SELECT count(*) FROM message_postings p
                                WHERE p.user_id = $1 AND p.lexeme = t.lexeme AND p.part = -1
                                  AND NOT p.by_name AND p.message_id > c.upto)
               FROM message_word_counts c WHERE c.user_id = $1 AND c.lexeme = t.lexeme)"""


_LEXICAL = {
    "ts_rank": """
lexical AS (
    SELECT l.id, l.rank, row_number() OVER (ORDER BY l.rank DESC, l.id) AS pos
    FROM (
        SELECT m.id, ts_rank(m.fts, q.tsq)::float8 AS rank
        FROM messages m, q
        WHERE m.user_id = $1 AND q.tsq IS NOT NULL AND m.fts @@ q.tsq {filters}
        ORDER BY rank DESC, m.id
        LIMIT $8
    ) AS l
)""",
    # BM25 over the user's own turns, each turn's document being its content plus
    # its speaker's name; document length is the number of distinct lexemes.
    "bm25": _BM25_TURNS + _BM25 + _BM25_RANKED_TURNS,
    # the same over documents that are a long turn's passages (``lexical_passages``)
    "bm25_passages": _BM25_PASSAGES + _BM25 + _BM25_RANKED,
}


# The same BM25 for a big user, searched with no filter, reading only the postings of
# the query's words (message_postings, migration 0180: per user and word, each
# document holding it with its tf and length): the corpus (turns, their mean length)
# and the turns a speaker's name brings to a word's document frequency come from
# message_text_stats (migration 0090), the rest of each word's from its postings. Ranks
# equal the full scan's but for three things: a turn that holds none of the query's
# words in its content (only its speaker's name) is no candidate here; the mean length
# counts a speaker's name beside their words even in a turn that names its own
# speaker (one word more, once); and for a word in more than ``per_word`` documents
# only its newest ``per_word`` are scored.
# Each: its corpus per speaker, its documents, its ranking, a word's kept count.
_STATS = {
    # over turns ("bm25")
    "bm25_stats": (
        "s.turns AS turns, s.lexemes AS lexemes",
        "p.part = -1",
        _BM25_RANKED_TURNS,
        _COUNTED,
    ),
    # ... and over a long turn's passages instead of the turn ("bm25_passages"): the
    # corpus counts the turns without passages and the passages (migration 0161 keeps
    # their numbers beside the turns'), the postings read are those of the passages and
    # of the turns that have none (a probe of message_passages' key per turn posting)
    "bm25_stats_passages": (
        "s.turns - s.long_turns + s.passages AS turns, "
        "s.lexemes - s.long_lexemes + s.passage_lexemes AS lexemes",
        "(p.part >= 0 OR NOT EXISTS (SELECT 1 FROM message_passages q "
        "WHERE q.user_id = p.user_id AND q.message_id = p.message_id))",
        _BM25_RANKED,
        "NULL::bigint",  # counts are kept of turns, not of passages
    ),
}


def _lexical_sql(name: str, per_word: int = POSTINGS_PER_WORD) -> str:
    """The lexical side ``name``: one of ``_LEXICAL``, or of ``_STATS`` reading at
    most ``per_word`` postings of each query word."""
    if name in _LEXICAL:
        return _LEXICAL[name]
    speakers, documents, ranked, counted = _STATS[name]
    stats = _BM25_STATS.format(
        speakers=speakers, documents=documents, per_word=int(per_word), counted=counted
    )
    return stats + ranked


LEXICAL = (*_LEXICAL, *_STATS)

# Exact: "+ 0" keeps the planner off the HNSW index, so every one of the user's
# rows is compared (used when the user has few rows).
_SEMANTIC_EXACT = """
semantic AS (
    SELECT m.id, (m.embedding <=> $3::vector)::float8 AS dist,
           row_number() OVER (ORDER BY (m.embedding <=> $3::vector) + 0, m.id) AS pos
    FROM messages m
    WHERE m.user_id = $1 AND $3::vector IS NOT NULL
      AND m.embedding_state = 'ready' AND m.embedding IS NOT NULL {filters}
    ORDER BY (m.embedding <=> $3::vector) + 0, m.id
    LIMIT $8
)"""

# Index: ordered by the indexed expression, and naming the partial index's
# predicate (vector_indexed: users listed for the index, migration 0050), so the
# HNSW walk is used. The distance kept is the full-precision one.
_SEMANTIC_INDEX = """
semantic AS MATERIALIZED (
    SELECT w.id, w.dist, row_number() OVER (ORDER BY w.walk, w.id) AS pos
    FROM (
        SELECT m.id, (m.embedding <=> $3::vector)::float8 AS dist,
               m.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim}) AS walk
        FROM messages m
        WHERE m.user_id = $1 AND m.vector_indexed AND m.embedding_state = 'ready' {filters}
        ORDER BY m.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim})
        LIMIT $8
    ) AS w
)"""

# With ``semantic_passages``, a turn's semantic distance is its best vector's: its
# own (its head) or one of its passages' (a long turn cut by the embedder, migration
# 0160), read only while the turn is ``ready`` (passages are written with the
# turn's vector, of its model).
# The turn comes once, at its best passage's distance.
#
# Exact: "+ 0" keeps the planner off the HNSW index, so every one of the user's
# rows is compared (used when the user has few rows).
_SEMANTIC_EXACT_PASSAGES = """
semantic AS (
    SELECT v.id, min(v.dist) AS dist, row_number() OVER (ORDER BY min(v.dist), v.id) AS pos
    FROM (
        SELECT m.id, (m.embedding <=> $3::vector)::float8 + 0 AS dist
        FROM messages m
        WHERE m.user_id = $1 AND $3::vector IS NOT NULL
          AND m.embedding_state = 'ready' AND m.embedding IS NOT NULL {filters}
        UNION ALL
        SELECT m.id, (p.embedding <=> $3::vector)::float8 + 0
        FROM message_passages p JOIN messages m ON m.id = p.message_id AND m.user_id = $1
        WHERE p.user_id = $1 AND $3::vector IS NOT NULL
          AND m.embedding_state = 'ready' {filters}
    ) AS v
    GROUP BY v.id
    ORDER BY min(v.dist), v.id
    LIMIT $8
)"""

# Index: ordered by the indexed expression, and naming the partial index's
# predicate (vector_indexed: users listed for the index, migration 0050), so the
# HNSW walk is used; the passages' walk likewise (their index, migration 0160),
# the turn's filters read from the turn as the walk goes. The distance kept is the
# full-precision one.
_SEMANTIC_INDEX_PASSAGES = """
semantic AS MATERIALIZED (
    SELECT w.id, min(w.dist) AS dist,
           row_number() OVER (ORDER BY min(w.walk), w.id) AS pos
    FROM (
        (SELECT m.id, (m.embedding <=> $3::vector)::float8 AS dist,
                m.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim}) AS walk
         FROM messages m
         WHERE m.user_id = $1 AND m.vector_indexed AND m.embedding_state = 'ready' {filters}
         ORDER BY m.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim})
         LIMIT $8)
        UNION ALL
        (SELECT m.id, (p.embedding <=> $3::vector)::float8,
                p.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim})
         FROM message_passages p JOIN messages m ON m.id = p.message_id AND m.user_id = $1
         WHERE p.user_id = $1 AND p.vector_indexed AND m.embedding_state = 'ready' {filters}
         ORDER BY p.embedding::halfvec({dim}) <=> $3::vector::halfvec({dim})
         LIMIT $8)
    ) AS w
    GROUP BY w.id
    ORDER BY min(w.walk), w.id
    LIMIT $8
)"""

# A candidate's neighbours: the walk reads only columns ``messages_episode_order_idx``
# holds (migration 0196, an index-only scan). Their lengths are read afterwards, once
# for all the candidates' neighbours (``with_neighbour_lengths``): a probe of
# message_shapes per neighbour read here was ~40% of a LoCoMo user's candidate
# statement (4,800 probes for 200 candidates, many of them the same turn).
_NEAR = """
LEFT JOIN LATERAL (
    SELECT array_agg(n.id ORDER BY n.occurred_at {desc}, n.id {desc}) AS ids,
           array_agg(n.occurred_at ORDER BY n.occurred_at {desc}, n.id {desc}) AS ats,
           array_agg(n.who ORDER BY n.occurred_at {desc}, n.id {desc}) AS whos
    FROM (SELECT m.id, m.occurred_at, {who} AS who
          FROM messages m
          WHERE m.episode_id = t.episode_id AND m.user_id = $1
            AND (m.occurred_at, m.id) {cmp} (t.occurred_at, t.id) {filters}
          ORDER BY m.occurred_at {desc}, m.id {desc}
          LIMIT $9) AS n
) AS {name} ON $9 > 0"""

CANDIDATES = """
WITH q AS (SELECT {tsq} AS tsq),
{lexical},
{semantic},
candidates AS (
    SELECT id, max(rank) AS rank, max(lex_pos) AS lex_pos, min(dist) AS dist,
           max(sem_pos) AS sem_pos
    FROM (SELECT id, rank, pos AS lex_pos, NULL::float8 AS dist, NULL::bigint AS sem_pos
          FROM lexical
          UNION ALL
          SELECT id, NULL, NULL, dist, pos FROM semantic) AS c
    GROUP BY id
)
SELECT c.*, t.occurred_at, coalesce(ts.asks, t.content ~ '\\?\\s*$') AS asks,
       coalesce(ts.lexemes, length(t.fts)) AS len,
       {t_who} AS who,
       coalesce(to_tsvector('english', coalesce(t.display_name, '')) @@ q.tsq, false) AS named,
       CASE WHEN $3::vector IS NOT NULL AND t.embedding_state = 'ready'
            THEN {cos} END AS cos,
       EXISTS (SELECT 1 FROM unnest($10::timestamptz[], $11::timestamptz[]) AS p(lo, hi)
               WHERE t.occurred_at >= p.lo AND t.occurred_at < p.hi) AS in_period,
       {learned} AS learned,
       bef.ids AS before_ids, bef.ats AS before_ats, bef.whos AS before_whos,
       aft.ids AS after_ids, aft.ats AS after_ats, aft.whos AS after_whos
FROM candidates c JOIN messages t ON t.id = c.id AND t.user_id = $1 CROSS JOIN q
     LEFT JOIN message_shapes ts ON ts.user_id = $1 AND ts.message_id = t.id
{before}
{after}
"""

# The conversation's own "now" for relative dates in a query ("last week"): the
# user's latest turn (in the chat searched, before the time read as of).
NOW = """
SELECT max(m.occurred_at) FROM messages m
WHERE m.user_id = $1 AND ($2::text IS NULL OR m.chat_id = $2)
  AND ($3::timestamptz IS NULL OR m.occurred_at < $3)
"""

ROWS = """
SELECT m.id, m.external_id, m.episode_id, m.chat_id, m.role, m.display_name, m.content,
       m.occurred_at
FROM messages m WHERE m.user_id = $1 AND m.id = ANY($2::bigint[])
"""

# A turn's length in distinct lexemes, from message_shapes (migration 0181: computed as
# the turn was stored; reading a long turn's words would detoast them), or from the
# turn where it has no row.
SHAPED_LENGTHS = """
SELECT s.message_id AS id, s.lexemes AS len FROM message_shapes s
WHERE s.user_id = $1 AND s.message_id = ANY($2::bigint[])
"""
TURN_LENGTHS = """
SELECT m.id, length(m.fts) AS len FROM messages m
WHERE m.user_id = $1 AND m.id = ANY($2::bigint[])
"""


# The best cosine of the query against what was learned from the turn: the user's
# memories whose source is this turn (facts, standing instructions; not an episode's
# summary), as recall reads them: live now, or with a time bound (``until``, which
# ``as_of`` sets), valid then (``sql.memory_valid``, as recall) (migration 0197);
# read only for a spec that weighs it ($12)
_LEARNED = f"""CASE WHEN $12::boolean AND $3::vector IS NOT NULL THEN
           (SELECT max(1 - (mi.embedding <=> $3::vector)) FROM memory_items mi
            WHERE mi.user_id = $1 AND mi.source_message_id = t.id
              AND mi.status = 'active' AND mi.embedding_state = 'ready'
              AND mi.type <> 'episode' AND {memory_valid("mi", "$7")})
       END"""

# A turn's speaker, for bursts: its role and display name.
_WHO = "{t}.role || ':' || coalesce({t}.display_name, '')"


# the cosine a candidate is read at: its own vector's, or its best passage's
_COS = "1 - (t.embedding <=> $3::vector)"
_COS_PASSAGES = """1 - least(t.embedding <=> $3::vector,
                           (SELECT min(p.embedding <=> $3::vector) FROM message_passages p
                            WHERE p.message_id = t.id AND p.user_id = $1))"""


def _statement(lexical: str, semantic: str, dim: int = 0, per_word: int = POSTINGS_PER_WORD) -> str:
    near = {"filters": _FILTERS, "who": _WHO.format(t="m")}
    passages = semantic in (_SEMANTIC_EXACT_PASSAGES, _SEMANTIC_INDEX_PASSAGES)
    return CANDIDATES.format(
        cos=_COS_PASSAGES if passages else _COS,
        tsq=or_tsquery("$2"),
        lexical=_lexical_sql(lexical, per_word).format(filters=_FILTERS),
        semantic=semantic.format(filters=_FILTERS, dim=dim),
        t_who=_WHO.format(t="t"),
        learned=_LEARNED,
        before=_NEAR.format(desc="DESC", cmp="<", name="bef", **near),
        after=_NEAR.format(desc="", cmp=">", name="aft", **near),
    )


# Named statements, built once from the fixed fragments above (no values inside).
EXACT = {name: _statement(name, _SEMANTIC_EXACT) for name in LEXICAL}
# ... whose semantic side reads a long turn's passages (``semantic_passages``)
EXACT_PASSAGES = {name: _statement(name, _SEMANTIC_EXACT_PASSAGES) for name in LEXICAL}


def exact_statement(lexical: str, per_word: int) -> str:
    """The exact statement of ``lexical`` reading at most ``per_word`` postings of each
    query word (``POSTINGS_PER_WORD`` in ``EXACT``)."""
    return _statement(lexical, _SEMANTIC_EXACT, per_word=per_word)


@functools.lru_cache(maxsize=16)
def index_statement(lexical: str, dim: int, passages: bool = False) -> str:
    """The HNSW variant; the index expression names the deployment's dimension."""
    return _statement(lexical, _SEMANTIC_INDEX_PASSAGES if passages else _SEMANTIC_INDEX, int(dim))


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
    as_of: datetime | None = None

    def __post_init__(self) -> None:
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
    # the cosine similarity to the query (None: no vector, or not embedded yet)
    cosine: float | None = None
    # found by a signal itself (False: as the neighbour of one that was)
    found: bool = True
    answers: bool = False  # the turn right after a found question

    def _result(self) -> dict[str, Any]:
        """The values of this hit's :class:`FoundTurn`."""
        return {
            "id": self.id,
            "external_message_id": self.external_message_id,
            "episode_id": self.episode_id,
            "chat_id": self.chat_id,
            "role": self.role,
            "display_name": self.display_name,
            "occurred_at": self.occurred_at.isoformat(),
            "content_snippet": clip(self.content, SNIPPET_CHARS),
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
    mode: Mode | Literal["newest"]
    hits: list[MessageHit] = field(default_factory=list)


class FoundTurn(BaseModel):
    """One turn a message search found, and how (``signals``)."""

    id: int
    episode_id: str | None = None
    chat_id: str | None = None
    role: str
    display_name: str | None = None
    occurred_at: str
    """ISO 8601."""
    content_snippet: str
    """The turn's content, cut at ``SNIPPET_CHARS``."""
    score: float
    signals: dict[str, Any]
    """fts and semantic (whether that signal found it), fts_rank and semantic_rank
    (its place in each signal's list, or None), similarity (the cosine, or None)."""
    # after the listed fields, and out of the schema (the API's hit is open)
    external_message_id: SkipJsonSchema[str | None] = None


class FoundTurns(BaseModel):
    """The answer of a message search: its mode and the turns, best first."""

    mode: str
    results: list[FoundTurn]

    @classmethod
    def of(cls, result: MessageResult) -> Self:
        """The answer of ``result``, checked once as it is built. Called on a subclass
        (the API's response model) it builds that, which the API then passes as it is:
        no second check per hit (a search's answer costs what its dict did)."""
        return cls.model_validate(
            {"mode": result.mode, "results": [h._result() for h in result.hits]}
        )


async def search_messages(
    pool: Executor, q: MessageQuery, *, user_id: str, vector: list[float] | None
) -> MessageResult:
    """Search ``user_id``'s turns under the mode's spec. ``vector`` is the query
    embedding, or None (full-text only). A blank or ``*`` query gives the newest
    turns (mode ``newest``), as every search of the API does."""
    if lists_newest(q.query):
        rows = await pool.fetch(NEWEST, user_id, q.chat_id, q.episode_id, q.since, q.until, q.limit)
        return MessageResult("newest", [_newest(r) for r in rows])
    mode: Mode = q.mode
    if vector is None and MESSAGE_MODES[mode].w_sem > 0:
        mode = "bm25" if MESSAGE_MODES[mode].lexical == "bm25" else "fts"
    hits = await rank_turns(
        pool,
        MESSAGE_MODES[mode],
        user_id=user_id,
        query=q.query,
        vector=vector,
        limit=q.limit,
        chat_id=q.chat_id,
        episode_id=q.episode_id,
        since=q.since,
        until=q.until,
        as_of=q.as_of,
    )
    return MessageResult(mode, hits)


NEWEST = """
SELECT id, external_id, episode_id, chat_id, role, display_name, content, occurred_at
FROM messages
WHERE user_id = $1 AND ($2::text IS NULL OR chat_id = $2)
  AND ($3::uuid IS NULL OR episode_id = $3::uuid)
  AND ($4::timestamptz IS NULL OR occurred_at >= $4)
  AND ($5::timestamptz IS NULL OR occurred_at < $5)
ORDER BY occurred_at DESC, id DESC
LIMIT $6
"""


def _newest(r: asyncpg.Record) -> MessageHit:
    # a candidate no signal found: score 0, no ranks, no similarity
    return _hit(r, Candidate(int(r["id"])), None, False)


async def rank_turns(
    conn: Executor,
    spec: RankSpec,
    *,
    user_id: str,
    query: str,
    vector: list[float] | None,
    limit: int,
    chat_id: str | None = None,
    episode_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    as_of: datetime | None = None,
    found_only: bool = False,
) -> list[MessageHit]:
    """The ``limit`` best turns of ``user_id`` for ``query`` under ``spec``.

    ``as_of``: only turns before it, and relative dates in the query seen from it
    (without it, from the user's latest turn: the conversation's own now).
    ``found_only``: leave out turns reached only as a neighbour of a hit, except
    the turn right after a found question (its likely answer)."""
    if as_of is not None and (until is None or as_of < until):
        until = as_of
    rows, named = await candidate_rows(
        conn,
        spec,
        user_id=user_id,
        query=query,
        vector=vector,
        limit=limit,
        chat_id=chat_id,
        episode_id=episode_id,
        since=since,
        until=until,
    )
    best, answers = score_rows(
        spec,
        rows,
        limit,
        periods=named,
        asks_assistant=asks_assistant(query),
        found_only=found_only,
    )
    if not best:
        return []
    found = await conn.fetch(ROWS, user_id, [c.id for c in best])
    by_id = {r["id"]: r for r in found}
    cos = {int(r["id"]): float(r["cos"]) for r in rows if r["cos"] is not None}
    return [_hit(by_id[c.id], c, cos.get(c.id), c.id in answers) for c in best if c.id in by_id]


async def candidate_rows(
    conn: Executor,
    spec: RankSpec,
    *,
    user_id: str,
    query: str,
    vector: list[float] | None,
    limit: int,
    chat_id: str | None = None,
    episode_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[list[Any], bool]:
    """The candidate rows ``spec`` reads for ``limit`` hits (``score_rows`` scores
    them), and whether the query names a period."""
    named, words = (
        await query_periods(conn, user_id, query, chat_id=chat_id, until=until)
        if spec.date_lift > 0
        else ([], query)
    )
    args: list[Any] = [
        user_id,
        words if spec.w_lex > 0 else None,
        vector if spec.w_sem > 0 else None,
        chat_id,
        episode_id,
        since,
        until,
        spec.k(limit),
        spec.turns_read,
        [lo for lo, _ in named],
        [hi for _, hi in named],
        spec.w_learned > 0,
    ]
    lexical = (
        ("bm25_passages" if spec.lexical_passages else "bm25")
        if spec.lexical == "bm25"
        else "ts_rank"
    )
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as c:
            return await _candidates(c, user_id, lexical, args, spec), bool(named)
    return await _candidates(conn, user_id, lexical, args, spec), bool(named)


async def query_periods(
    conn: Executor, user_id: str, query: str, *, chat_id: str | None, until: datetime | None
) -> tuple[list[tuple[datetime, datetime]], str]:
    """The periods ``query`` names, a relative one ("last week") read from the
    conversation's own now (:data:`NOW`), never the wall clock; "the week before the
    launch" from the time of the turn that best matches "launch" (BM25). And the
    query's words for the lexical side: an event read as a time is left out of them
    (the launch says when, not what is asked)."""
    ref = await conn.fetchval(NOW, user_id, chat_id, until) if relative(query) else None
    found = periods(query, ref)
    words = query
    for unit, side, event, phrase in event_anchors(query):
        hits = await rank_turns(
            conn,
            MESSAGE_MODES["bm25"],
            user_id=user_id,
            query=event,
            vector=None,
            limit=1,
            chat_id=chat_id,
            until=until,
        )
        span = around_event(unit, side, hits[0].occurred_at) if hits else None
        if span is not None:
            found.append(span)
            words = words.replace(phrase, " ")
    return found, words


def score_rows(
    spec: RankSpec,
    rows: list[Any],
    limit: int,
    *,
    periods: bool = False,
    asks_assistant: bool = False,
    found_only: bool = False,
) -> tuple[list[Candidate[int]], set[int]]:
    """The ``limit`` best of the candidate rows under ``spec`` (the statement's rows,
    ``periods``: the query names one), and the ids of turns answering a found question.

    The rows are read in id order, not the order the plan returned them in: a
    neighbour's share is summed over the candidates around it, and floating-point
    sums in another order can differ in the last digit and swap two equal turns,
    so the same question gets the same ranking whatever plan PostgreSQL picked (a
    prepared statement turns generic after five runs)."""
    cands: list[Candidate[int]] = []
    at: dict[int, datetime] = {}
    for r in sorted(rows, key=lambda r: r["id"]):
        at[r["id"]] = r["occurred_at"]
        for ids, ats in ((r["before_ids"], r["before_ats"]), (r["after_ids"], r["after_ats"])):
            at.update(zip(ids or (), ats or (), strict=True))
        cands.append(
            Candidate(
                int(r["id"]),
                rank=None if r["rank"] is None else float(r["rank"]),
                lex_pos=None if r["lex_pos"] is None else int(r["lex_pos"]),
                distance=None if r["dist"] is None else float(r["dist"]),
                sem_pos=None if r["sem_pos"] is None else int(r["sem_pos"]),
                occurred_at=r["occurred_at"],
                asks=bool(r["asks"]),
                length=int(r["len"]),
                in_period=bool(r["in_period"]),
                named=bool(r["named"]),
                learned=None if r["learned"] is None else float(r["learned"]),
                before=tuple(r["before_ids"] or ()),
                after=tuple(r["after_ids"] or ()),
                speaker=r["who"],
                before_speakers=tuple(r["before_whos"] or ()),
                after_speakers=tuple(r["after_whos"] or ()),
                before_at=tuple(r["before_ats"] or ()),
                after_at=tuple(r["after_ats"] or ()),
                before_lengths=tuple(r["before_lens"] or ()),
                after_lengths=tuple(r["after_lens"] or ()),
            )
        )
    spec = spec.for_chat(cands)
    scored = fuse(spec, cands, periods=periods, asks_assistant=asks_assistant)
    answers = {n for c in scored if c.found for n in answer_of(spec, c)}
    if found_only:
        scored = [c for c in scored if c.found or c.id in answers]
    best = ranked(spec, scored, limit, tie=lambda c: (-at[c.id].timestamp(), c.id))
    return best, answers


async def _candidates(
    conn: Any, user_id: str, lexical: str, args: list[Any], spec: RankSpec
) -> list[Any]:
    vector = args[2]
    # Only users with many embedded turns are in the HNSW index (the embedder lists
    # them: shared/embeddings/vector_index.py); everyone else is compared exactly.
    big = await vector_index.uses_index(conn, user_id, "message")
    if (
        big
        and lexical in ("bm25", "bm25_passages")
        and all(a is None for a in args[3:7])
        and await vector_index.uses_postings(conn, user_id)
    ):
        # no chat, episode or time filter: the corpus is all the user's turns, whose
        # statistics are kept (migrations 0090, 0161), and the user's postings are
        # complete (listed and filled: 0180, 0198), so only the matching turns (or
        # passages) are read
        lexical = "bm25_stats" if lexical == "bm25" else "bm25_stats_passages"
    if vector is None or not big:
        exact = EXACT_PASSAGES if spec.semantic_passages else EXACT
        rows = await conn.fetch(exact[lexical], *args)
    else:
        async with hnsw_walk(conn, ef_search=EF_SEARCH) as c:
            statement = index_statement(lexical, len(vector), spec.semantic_passages)
            rows = await c.fetch(statement, *args)
    return await with_neighbour_lengths(conn, user_id, rows)


async def with_neighbour_lengths(
    conn: Executor, user_id: str, rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The candidate rows, each with its neighbours' lengths (``before_lens``,
    ``after_lens``, in the order of their ids), read once for all of them."""
    ids = {n for r in rows for side in ("before_ids", "after_ids") for n in r[side] or ()}
    lengths: dict[int, int] = {}
    if ids:
        lengths = {r["id"]: r["len"] for r in await conn.fetch(SHAPED_LENGTHS, user_id, list(ids))}
        missing = [n for n in ids if n not in lengths]
        if missing:
            lengths.update(
                {r["id"]: r["len"] for r in await conn.fetch(TURN_LENGTHS, user_id, missing)}
            )
    out = []
    for r in rows:
        row = dict(r)
        for side, lens in (("before_ids", "before_lens"), ("after_ids", "after_lens")):
            near = r[side]
            # a turn gone since the walk (a concurrent delete) reads as empty
            row[lens] = None if near is None else [lengths.get(n, 0) for n in near]
        out.append(row)
    return out


def _hit(r: asyncpg.Record, c: Candidate[int], cosine: float | None, answers: bool) -> MessageHit:
    return MessageHit(
        id=int(r["id"]),
        external_message_id=r["external_id"],
        episode_id=str(r["episode_id"]),
        chat_id=r["chat_id"],
        role=r["role"],
        display_name=r["display_name"],
        content=r["content"],
        occurred_at=r["occurred_at"],
        score=c.score,
        lexical_rank=c.lex_pos,
        semantic_rank=c.sem_pos,
        similarity=None if c.distance is None else 1.0 / (1.0 + c.distance),
        cosine=cosine,
        found=c.found,
        answers=answers,
    )
