"""Ordered SQL migrations, applied once, recorded with checksums, under an advisory lock.

Files live in ``shared/migrations/NNNN_name.sql`` and run in name order, each in
its own transaction. ``{{EMBEDDING_DIM}}`` in a file is replaced with the
deployment's vector dimension; the dimension is recorded, and a database made
with one dimension refuses to be migrated with another.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from shared.db import Conn, connect
from shared.errors import ConfigError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
LOCK_KEY = 0x656E6772616D  # "engram"


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path
    sql: str
    checksum: str


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    out = []
    for path in sorted(directory.glob("*.sql")):
        sql = path.read_text()
        out.append(
            Migration(
                version=path.stem,
                path=path,
                sql=sql,
                checksum=hashlib.sha256(sql.encode()).hexdigest(),
            )
        )
    return out


async def migrate(conn: Conn, *, embedding_dim: int) -> list[str]:
    """Apply every pending migration; return the versions applied (empty when up to date).

    Safe to run twice and from two processes at once: the second waits on the lock
    and then finds nothing to do. A changed file that was already applied is an error.
    """
    await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        await conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version text PRIMARY KEY,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            );
            CREATE TABLE IF NOT EXISTS engram_meta (
                key text PRIMARY KEY,
                value text NOT NULL
            );
            """
        )
        stored_dim = await conn.fetchval(
            "SELECT value FROM engram_meta WHERE key = 'embedding_dim'"
        )
        if stored_dim is not None and int(stored_dim) != embedding_dim:
            raise ConfigError(
                f"this database stores {stored_dim}-dimensional vectors but "
                f"ENGRAM_EMBEDDING_DIM is {embedding_dim}; use a new database or the old setting"
            )
        applied = {
            r["version"]: r["checksum"]
            for r in await conn.fetch("SELECT version, checksum FROM schema_migrations")
        }
        done: list[str] = []
        for m in load_migrations():
            if m.version in applied:
                if applied[m.version] != m.checksum:
                    raise ConfigError(
                        f"migration {m.version} changed after it was applied; "
                        "add a new migration instead of editing an old one"
                    )
                continue
            sql = m.sql.replace("{{EMBEDDING_DIM}}", str(embedding_dim))
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)",
                    m.version,
                    m.checksum,
                )
                await conn.execute(
                    """
                    INSERT INTO engram_meta (key, value) VALUES ('embedding_dim', $1)
                    ON CONFLICT (key) DO NOTHING
                    """,
                    str(embedding_dim),
                )
            log.info("applied migration %s", m.version)
            done.append(m.version)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


async def apply(url: str, embedding_dim: int) -> list[str]:
    """Connect to ``url``, apply the pending migrations, return their names."""
    conn = await connect(url, codecs=False)
    try:
        return await migrate(conn, embedding_dim=embedding_dim)
    finally:
        await conn.close()
