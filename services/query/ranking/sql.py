"""The SQL pieces every candidate generator shares: one OR-tsquery, one HNSW walk.

- ``or_tsquery(param)``: the query's English lexemes (stemmed, stop words
  dropped), quoted so punctuation cannot break the query, joined by ``|``: a
  row matching any of the words is a candidate and ``ts_rank`` rewards more
  (an agent's query is natural language, not a boolean expression). NULL when
  the text has no lexeme, so ``fts @@ NULL`` matches nothing.
- ``memory_valid(m, at)``: a memory is what holds: live now (not expired, not
  superseded unless asked for), or, given a time, valid then (Zep's bi-temporal
  reading: ``valid_from <= at < valid_to``, superseded or expired since or not);
  recall and the learned lift of a turn search read memories by it.
- ``hnsw_walk(conn)``: a transaction whose HNSW scans keep walking until enough
  of one user's rows pass the filter (pgvector 0.8's iterative scan), with
  ``enable_sort = off`` so that for a user holding ~10% of a table the planner
  does not prefer "fetch all the user's rows, sort by distance" (measured ~95 ms
  at 100k rows) over the walk.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from shared.db import Conn, Executor

EF_SEARCH = 100
MAX_SCAN_TUPLES = 50_000


def or_tsquery(param: str) -> str:
    """SQL for the OR-tsquery of the text in ``param`` (e.g. ``"$2"``); NULL if no lexeme."""
    return (
        "nullif(array_to_string(ARRAY("
        f"SELECT quote_literal(w) FROM unnest(tsvector_to_array(to_tsvector('english', "
        f"{param}::text))) AS w), ' | '), '')::tsquery"
    )


def memory_valid(m: str, at: str, superseded: str = "false") -> str:
    """SQL: memory ``m`` holds now (``at`` NULL) or held at ``at``; ``superseded``, a
    boolean SQL expression, lets superseded memories in when reading now."""
    return f"""CASE WHEN {at}::timestamptz IS NULL
             THEN ({m}.expires_at IS NULL OR {m}.expires_at > now())
                  AND ({superseded} OR {m}.superseded_at IS NULL)
             ELSE {m}.valid_from <= {at}::timestamptz
                  AND ({m}.valid_to IS NULL OR {m}.valid_to > {at}::timestamptz) END"""


def walk_settings(ef_search: int = EF_SEARCH) -> str:
    """The ``SET LOCAL`` block of an HNSW walk (they end with the transaction)."""
    return (
        "SET LOCAL enable_sort = off;"
        "SET LOCAL hnsw.iterative_scan = relaxed_order;"
        f"SET LOCAL hnsw.ef_search = {int(ef_search)};"
        f"SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}"
    )


@contextlib.asynccontextmanager
async def hnsw_walk(conn: Executor, *, ef_search: int = EF_SEARCH) -> AsyncIterator[Conn]:
    """A connection inside a transaction set up for an HNSW walk.

    A pool lends a connection; a connection already in a transaction gets a
    savepoint; otherwise one round trip opens the transaction and sets the walk's
    parameters, and the read-only statements inside end with COMMIT."""
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as c, hnsw_walk(c, ef_search=ef_search) as inner:
            yield inner
        return
    if conn.is_in_transaction():
        async with conn.transaction():
            await conn.execute(walk_settings(ef_search))
            yield conn
        return
    await conn.execute("BEGIN;" + walk_settings(ef_search))
    try:
        yield conn
    except BaseException:
        if not conn.is_closed() and conn.is_in_transaction():
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")
