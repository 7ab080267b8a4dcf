"""PostgreSQL access: one asyncpg pool per process, with pgvector and JSON codecs."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from pgvector.asyncpg import register_vector

from shared.errors import InfrastructureError

Conn = asyncpg.Connection | PoolConnectionProxy
"""A connection: one of its own, or one acquired from a pool."""

Executor = Conn | asyncpg.Pool
"""Anything that runs a statement."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _reset(conn: asyncpg.Connection) -> None:
    """Nothing more on a connection's way back to the pool than asyncpg's rollback of
    a transaction left open (done before this is called).

    asyncpg's default reset also sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` on every release, a round trip that doubled the cost of a one-row
    read (client CPU 0.53 -> 0.29 ms, PostgreSQL's 1.2 -> 0.7 ms; a search releases
    four). engram leaves no session state on a pooled connection: settings are
    ``SET LOCAL``, advisory locks ``pg_advisory_xact_lock``, no LISTEN, no
    holdable cursor (the migrator's session lock is on a connection of its own)."""


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """Open a pool whose connections understand ``vector`` and decode JSON(B) to Python."""
    try:
        pool = await asyncpg.create_pool(
            url, min_size=min_size, max_size=max_size, init=_init_connection, reset=_reset
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise InfrastructureError(f"cannot connect to PostgreSQL: {exc}") from exc
    assert pool is not None
    return pool


async def connect(url: str, *, codecs: bool = True) -> asyncpg.Connection:
    """One connection with the same codecs as the pool (for CLI commands and tests).

    ``codecs=False`` for the migrator, which runs before the ``vector`` type exists."""
    try:
        conn = await asyncpg.connect(url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise InfrastructureError(f"cannot connect to PostgreSQL: {exc}") from exc
    if codecs:
        await _init_connection(conn)
    return conn


async def audit(
    conn: Executor,
    *,
    user_id: str | None,
    action: str,
    entity: str,
    entity_id: str | None,
    actor: str = "system",
    details: dict[str, Any] | None = None,
) -> None:
    """Append one line to the audit log (create, update, archive, supersede, delete...)."""
    await conn.execute(
        """
        INSERT INTO audit_log (user_id, actor, action, entity, entity_id, details)
        VALUES ($1, $2, $3, $4, $5, $6)
        """,
        user_id,
        actor,
        action,
        entity,
        entity_id,
        details or {},
    )
