"""Which users' rows are in the HNSW indexes (migration 0050).

A user with few embedded rows of a table is searched exactly; their rows stay out
of the table's HNSW index, so writing their vectors costs no index insert. Once
they have more than ``min_rows`` embedded rows, the embedder lists them in
``vector_index_users``, marks their rows ``vector_indexed`` (PostgreSQL inserts
them into the partial index), and sets ``ready``; from then on every vector
written for them is marked at once (``store``'s write statement), and searches
walk the index for them (``is_ready``).
"""

from __future__ import annotations

import asyncio
import logging
import time

from shared.db import Executor
from shared.embeddings.store import TABLES
from shared.events import EmbedKind

log = logging.getLogger(__name__)

MIN_ROWS = 5000
MARK_BATCH = 2000
# Longer than any write transaction that may have read the list before this user
# was on it (the embedder's are a few milliseconds): after it, no unmarked vector
# of theirs can still appear, and a last pass finds every one.
SETTLE_S = 2.0

# A big user's BM25 reads at most this many postings of each query word, its newest
# (services/query/ranking/turns.py, ``bm25_stats``), and a word in more turns than
# that has its document frequency from ``message_word_counts`` (migration 0200):
# ``count_words`` keeps the count of every word in at least ``WORDS_COUNTED_FROM`` of
# the user's turns (half the limit: a word that grows past the limit between two
# counts is mostly counted already), and counts again once the user's turns have
# grown by ``RECOUNT_GROWTH``.
POSTINGS_PER_WORD = 2_000
WORDS_COUNTED_FROM = POSTINGS_PER_WORD // 2
RECOUNT_GROWTH = 0.1

IS_READY = "SELECT ready FROM vector_index_users WHERE user_id = $1 AND kind = $2"
LIST = """
INSERT INTO vector_index_users (user_id, kind) VALUES ($1, $2)
ON CONFLICT (user_id, kind) DO NOTHING
"""
SET_READY = "UPDATE vector_index_users SET ready = true WHERE user_id = $1 AND kind = $2"
COUNT_READY = {
    kind: f"""
        SELECT count(*) FROM (
            SELECT 1 FROM {t.name} WHERE user_id = $1 AND embedding_state = 'ready' LIMIT $2
        ) AS r
    """
    for kind, t in TABLES.items()
}
MARK = {
    kind: f"""
        UPDATE {t.name} SET vector_indexed = true
        WHERE user_id = $1 AND id IN (
            SELECT id FROM {t.name}
            WHERE user_id = $1 AND embedding IS NOT NULL AND NOT vector_indexed
            LIMIT $2
        )
    """
    for kind, t in TABLES.items()
}
# a listed user's turns' passages (migration 0160) go into their own index with them
MARK_PASSAGES = """
    UPDATE message_passages SET vector_indexed = true
    WHERE user_id = $1 AND (message_id, idx) IN (
        SELECT message_id, idx FROM message_passages
        WHERE user_id = $1 AND NOT vector_indexed
        LIMIT $2
    )
"""

# A big user's BM25 postings (migrations 0180, 0198): listed, the triggers write the
# postings of the user's new turns and passages; the fills write those stored before
# (a posting already there is kept); ready, the search reads them.
POSTINGS_LIST = """
INSERT INTO message_postings_users (user_id) VALUES ($1) ON CONFLICT (user_id) DO NOTHING
"""
POSTINGS_FILL = (
    """
    INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
    SELECT r.*
    FROM messages m,
         message_postings_rows(m.user_id, m.id, -1, m.fts, coalesce(m.display_name, '')) AS r
    WHERE m.user_id = $1
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
    SELECT r.*
    FROM message_passages p,
         message_postings_rows(p.user_id, p.message_id, p.idx, p.fts, p.speaker) AS r
    WHERE p.user_id = $1
    ON CONFLICT DO NOTHING
    """,
)
# A turn deleted while a fill read it: the delete's trigger ran before the fill's
# postings were there to remove, so the fill left them. Swept once every write that
# was in flight during the fills has ended (after a settling time).
POSTINGS_SWEEP = """
DELETE FROM message_postings p
WHERE p.user_id = $1
  AND CASE WHEN p.part < 0
      THEN NOT EXISTS (SELECT 1 FROM messages m WHERE m.user_id = $1 AND m.id = p.message_id)
      ELSE NOT EXISTS (SELECT 1 FROM message_passages q
                       WHERE q.user_id = $1 AND q.message_id = p.message_id AND q.idx = p.part)
  END
"""
POSTINGS_READY = "UPDATE message_postings_users SET ready = true WHERE user_id = $1"
POSTINGS_ARE_READY = "SELECT ready FROM message_postings_users WHERE user_id = $1"

# A ready user's common words, counted up to the newest turn stored before a settling
# time (so no write still in flight holds a lower id: it would be in neither the
# count nor the postings a search adds since). Each row is a count and the turn it
# counts up to, right on its own whenever it is read, so rows are replaced one by one
# (an upsert, then the words no longer counted) with no transaction around them.
NEWEST_TURN = "SELECT max(id) FROM messages WHERE user_id = $1"
COUNT_WORDS = """
SELECT p.lexeme, count(*) AS turns
FROM message_postings p
WHERE p.user_id = $1 AND p.part = -1 AND NOT p.by_name AND p.message_id <= $2
GROUP BY p.lexeme
HAVING count(*) >= $3
"""
KEEP_COUNTS = """
INSERT INTO message_word_counts (user_id, lexeme, turns, upto)
SELECT $1, c.lexeme, c.turns, $4 FROM unnest($2::text[], $3::bigint[]) AS c(lexeme, turns)
ON CONFLICT (user_id, lexeme) DO UPDATE SET turns = excluded.turns, upto = excluded.upto
"""
DROP_UNCOUNTED = "DELETE FROM message_word_counts WHERE user_id = $1 AND upto < $2"
_USER_TURNS = "(SELECT coalesce(sum(s.turns), 0) FROM message_text_stats s WHERE s.user_id = $1)"
COUNTED_TURNS = (
    f"UPDATE message_postings_users SET counted_turns = {_USER_TURNS} WHERE user_id = $1"
)
# a ready user whose turns grew by a share since their words were last counted
RECOUNT_DUE = f"""
SELECT u.counted_turns IS NULL OR {_USER_TURNS} > u.counted_turns * (1 + $2::float8)
FROM message_postings_users u
WHERE u.user_id = $1 AND u.ready
"""


async def is_ready(conn: Executor, user_id: str, kind: EmbedKind) -> bool:
    """Whether every vector of this user's in ``kind``'s table is in its HNSW index."""
    return bool(await conn.fetchval(IS_READY, user_id, kind))


# (user, table) -> (is_ready, until when that answer is used). A user is listed
# rarely and either search path returns correct results, so a search asks the
# database at most once per user and table per READY_TTL seconds in a process
# (index_user forgets the answer in its own process at once).
READY_TTL = 60.0
_READY_MAX = 10_000
_ready: dict[tuple[str, EmbedKind], tuple[bool, float]] = {}


async def uses_index(conn: Executor, user_id: str, kind: EmbedKind) -> bool:
    """``is_ready``, remembered: what a search asks before choosing its path."""
    now = time.monotonic()
    cached = _ready.get((user_id, kind))
    if cached is not None and cached[1] > now:
        return cached[0]
    ready = await is_ready(conn, user_id, kind)
    if len(_ready) >= _READY_MAX:
        _ready.clear()
    _ready[(user_id, kind)] = (ready, now + READY_TTL)
    return ready


_postings: dict[str, tuple[bool, float]] = {}


async def uses_postings(conn: Executor, user_id: str) -> bool:
    """Whether the user's BM25 postings are complete (a search may read them),
    remembered as ``uses_index`` remembers its answer."""
    now = time.monotonic()
    cached = _postings.get(user_id)
    if cached is not None and cached[1] > now:
        return cached[0]
    ready = bool(await conn.fetchval(POSTINGS_ARE_READY, user_id))
    if len(_postings) >= _READY_MAX:
        _postings.clear()
    _postings[user_id] = (ready, now + READY_TTL)
    return ready


async def _fill_postings(conn: Executor, user_id: str) -> None:
    for statement in POSTINGS_FILL:
        await conn.execute(statement, user_id)


async def count_words(
    conn: Executor,
    user_id: str,
    *,
    settle_s: float = SETTLE_S,
    counted_from: int | None = None,
) -> int:
    """Count the user's common words (those in at least ``counted_from`` of their
    turns, ``WORDS_COUNTED_FROM`` if not given) into ``message_word_counts``, up to
    their newest turn stored ``settle_s`` ago; returns the words counted. A search
    reads a count plus the postings written since, so a count of any age is exact
    (a deleted turn takes itself off it; one deleted while this counts stays in the
    new count, one too many, until the next); a fresh one keeps those postings few."""
    least = WORDS_COUNTED_FROM if counted_from is None else counted_from
    upto = await conn.fetchval(NEWEST_TURN, user_id)
    if upto is None:
        return 0
    await asyncio.sleep(settle_s)
    started = time.monotonic()
    # counted first (seconds at a million turns), then written: a delete's trigger
    # never waits on the count
    counted = await conn.fetch(COUNT_WORDS, user_id, upto, least)
    lexemes, turns = [r["lexeme"] for r in counted], [r["turns"] for r in counted]
    await conn.execute(KEEP_COUNTS, user_id, lexemes, turns, upto)
    await conn.execute(DROP_UNCOUNTED, user_id, upto)
    await conn.execute(COUNTED_TURNS, user_id)
    words = len(counted)
    log.info(
        "postings: %d common word(s) of user %s counted in %.1f s",
        words,
        user_id,
        time.monotonic() - started,
    )
    return words


async def index_user(
    conn: Executor,
    user_id: str,
    kind: EmbedKind,
    *,
    batch: int = MARK_BATCH,
    settle_s: float = SETTLE_S,
) -> int:
    """List the user, put all their vectors of ``kind`` into the index, set ready.

    Safe to run twice or in two processes at once (each batch marks what is still
    unmarked); returns the rows this call marked."""
    await conn.execute(LIST, user_id, kind)
    postings = kind == "message"
    if postings:
        await conn.execute(POSTINGS_LIST, user_id)
    started = time.monotonic()
    marked = await _mark_all(conn, user_id, kind, batch)
    if postings:
        await _fill_postings(conn, user_id)
    await asyncio.sleep(settle_s)
    marked += await _mark_all(conn, user_id, kind, batch)
    if postings:
        # a turn whose write began before the list was seen has no postings from its
        # trigger and was not committed for the first fill: this one writes them
        await _fill_postings(conn, user_id)
        await asyncio.sleep(settle_s)
        swept = await conn.execute(POSTINGS_SWEEP, user_id)
        if swept != "DELETE 0":
            log.info("postings: %s of user %s's deleted turns swept", swept.split()[-1], user_id)
        await conn.execute(POSTINGS_READY, user_id)
        _postings.pop(user_id, None)
        await count_words(conn, user_id, settle_s=settle_s)
    await conn.execute(SET_READY, user_id, kind)
    _ready.pop((user_id, kind), None)
    log.info(
        "vector index: %d %s row(s) of user %s indexed in %.1f s",
        marked,
        TABLES[kind].name,
        user_id,
        time.monotonic() - started,
    )
    return marked


async def _mark_all(conn: Executor, user_id: str, kind: EmbedKind, batch: int) -> int:
    total = 0
    if kind == "message":
        while True:
            status = await conn.execute(MARK_PASSAGES, user_id, batch)
            if int(status.split()[-1]) < batch:
                break
    while True:
        status = await conn.execute(MARK[kind], user_id, batch)
        n = int(status.split()[-1])
        total += n
        if n < batch:
            return total
        log.info(
            "vector index: %d %s row(s) of user %s indexed so far",
            total,
            TABLES[kind].name,
            user_id,
        )


class Indexer:
    """Lists users whose tables outgrow exact search; one per embedder process.

    ``note`` is called for every (user, table) that got vectors; ``run`` (the
    embedder's periodic job) checks those due: a user found small is not counted
    again for ``recheck_s``, but is once it has passed if vectors came meanwhile
    (an import that crosses the limit after a check, then stops, is still
    listed); one found listed and ready never again, but for its words' counts: a ready
    user who got turns is checked at most every ``recheck_s``, and their common
    words counted again once their turns grew by ``RECOUNT_GROWTH``."""

    def __init__(
        self, *, min_rows: int = MIN_ROWS, recheck_s: float = 60.0, settle_s: float = SETTLE_S
    ) -> None:
        self.min_rows = min_rows
        self.recheck_s = recheck_s
        self.settle_s = settle_s
        self._due: set[tuple[str, EmbedKind]] = set()
        self._small_until: dict[tuple[str, EmbedKind], float] = {}
        self._ready: set[tuple[str, EmbedKind]] = set()
        self._grown: set[str] = set()
        self._recount_at: dict[str, float] = {}

    def note(self, user_id: str, kind: EmbedKind) -> None:
        key = (user_id, kind)
        if key not in self._ready:
            self._due.add(key)
        elif kind == "message":
            self._grown.add(user_id)

    async def run(self, conn: Executor) -> int:
        """Check the users due; index those over the limit. Returns users indexed."""
        now = time.monotonic()
        due = {k for k in self._due if self._small_until.get(k, 0.0) <= now}
        self._due -= due  # the rest wait for their recheck time
        if len(self._small_until) > 100_000:
            self._small_until = {k: t for k, t in self._small_until.items() if t > now}
        indexed = 0
        for user_id, kind in sorted(due):
            ready = await conn.fetchval(IS_READY, user_id, kind)
            if ready:
                self._ready.add((user_id, kind))
                continue
            if ready is None:  # not listed: count up to the limit
                n = await conn.fetchval(COUNT_READY[kind], user_id, self.min_rows + 1)
                if n <= self.min_rows:
                    self._small_until[(user_id, kind)] = time.monotonic() + self.recheck_s
                    continue
            # over the limit, or listed by a process that did not finish: (re)do it
            await index_user(conn, user_id, kind, settle_s=self.settle_s)
            self._ready.add((user_id, kind))
            indexed += 1
        await self._recount(conn, now)
        return indexed

    async def _recount(self, conn: Executor, now: float) -> None:
        due = {u for u in self._grown if self._recount_at.get(u, 0.0) <= now}
        self._grown -= due
        if len(self._recount_at) > 100_000:
            self._recount_at = {u: t for u, t in self._recount_at.items() if t > now}
        for user_id in sorted(due):
            self._recount_at[user_id] = now + self.recheck_s
            if await conn.fetchval(RECOUNT_DUE, user_id, RECOUNT_GROWTH):
                await count_words(conn, user_id, settle_s=self.settle_s)
