"""Ordered SQL migrations, applied once, recorded with checksums, under an advisory lock.

Files live in ``shared/migrations/NNNN_name.sql``; each number is used once and
they run in number order, each in its own transaction. ``{{EMBEDDING_DIM}}`` in a
file is replaced with the deployment's vector dimension; the dimension is
recorded, and a database made with one dimension refuses to be migrated with
another.

Order is kept: a pending file numbered below the highest migration already
applied is refused (it would run after later ones, on a schema its author never
saw); give it the next free number instead. Header lines at the top of a file:

- ``-- migrate: no-transaction``: the file runs statement by statement outside a
  transaction, so it may ``CREATE INDEX CONCURRENTLY`` (write it so that a rerun
  after a failure is harmless: ``IF NOT EXISTS``, ``CREATE OR REPLACE``);
- ``-- migrate: replaces <version>``: the file is that older migration under a
  new number; a database that applied the old version records the new one as
  applied without running it again.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from shared.db import Conn, connect
from shared.errors import ConfigError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
LOCK_KEY = 0x656E6772616D  # "engram"


HEADER = re.compile(r"^--\s*migrate:\s*(?P<word>[a-z-]+)(?:\s+(?P<arg>\S+))?\s*$")


@dataclass(frozen=True)
class Migration:
    version: str
    path: Path
    sql: str
    checksum: str
    transactional: bool = True
    replaces: tuple[str, ...] = ()

    @property
    def number(self) -> int:
        return number_of(self.version)


def number_of(version: str) -> int:
    """``0051_user_lexeme_index`` -> 51."""
    head = version.split("_", 1)[0]
    if not head.isdigit():
        raise ConfigError(f"migration {version!r} does not start with its number (NNNN_name)")
    return int(head)


def _headers(sql: str, version: str) -> tuple[bool, tuple[str, ...]]:
    transactional, replaces = True, []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        m = HEADER.match(line.strip())
        if m is None:
            continue
        word, arg = m.group("word"), m.group("arg")
        if word == "no-transaction" and arg is None:
            transactional = False
        elif word == "replaces" and arg:
            replaces.append(arg)
        else:
            raise ConfigError(f"migration {version}: unknown header {line.strip()!r}")
    return transactional, tuple(replaces)


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations in number order; two files with one number are an error."""
    out: list[Migration] = []
    for path in sorted(directory.glob("*.sql"), key=lambda p: (number_of(p.stem), p.stem)):
        sql = path.read_text()
        transactional, replaces = _headers(sql, path.stem)
        m = Migration(
            version=path.stem,
            path=path,
            sql=sql,
            checksum=hashlib.sha256(sql.encode()).hexdigest(),
            transactional=transactional,
            replaces=replaces,
        )
        if out and out[-1].number == m.number:
            raise ConfigError(
                f"migrations {out[-1].version} and {m.version} share the number {m.number}; "
                "give the newer one the next free number"
            )
        out.append(m)
    return out


def statements(sql: str) -> list[str]:
    """``sql`` split at top-level semicolons (outside quotes, ``$$`` bodies and comments)."""
    out: list[str] = []
    start = i = 0
    n = len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if c == "'":
            end = sql.find("'", i + 1)
            while end >= 0 and sql.startswith("''", end):
                end = sql.find("'", end + 2)
            i = n if end < 0 else end + 1
            continue
        if c == "$":
            m = re.match(r"\$[A-Za-z_]*\$", sql[i:])
            if m:
                tag = m.group(0)
                end = sql.find(tag, i + len(tag))
                i = n if end < 0 else end + len(tag)
                continue
        if c == ";":
            out.append(sql[start:i].strip())
            start = i + 1
        i += 1
    out.append(sql[start:].strip())
    return [
        s
        for s in out
        if s
        and not all(line.strip().startswith("--") or not line.strip() for line in s.splitlines())
    ]


async def migrate(conn: Conn, *, embedding_dim: int, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply every pending migration; return the versions applied (empty when up to date).

    Safe to run twice and from two processes at once: the second waits on the lock
    and then finds nothing to do. A changed file that was already applied is an error;
    so is a pending file numbered below the highest one applied (nothing runs then).
    A file that ``replaces`` an applied version is recorded, not run, and not returned.
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
        migrations = load_migrations(directory)
        pending: list[Migration] = []
        for m in migrations:
            if m.version in applied:
                if applied[m.version] != m.checksum:
                    raise ConfigError(
                        f"migration {m.version} changed after it was applied; "
                        "add a new migration instead of editing an old one"
                    )
            elif any(old in applied for old in m.replaces):
                # The same change under its new number: record it, never run it twice.
                await conn.execute(RECORD, m.version, m.checksum)
                applied[m.version] = m.checksum
                log.info("recorded migration %s (applied before as %s)", m.version, m.replaces)
            else:
                pending.append(m)
        check_order(pending, applied, migrations)
        done: list[str] = []
        for m in pending:
            sql = m.sql.replace("{{EMBEDDING_DIM}}", str(embedding_dim))
            if m.transactional:
                async with conn.transaction():
                    await conn.execute(sql)
                    await _record(conn, m, embedding_dim)
            else:
                for statement in statements(sql):
                    await conn.execute(statement)
                await _record(conn, m, embedding_dim)
            log.info("applied migration %s", m.version)
            done.append(m.version)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)


RECORD = "INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)"


async def _record(conn: Conn, m: Migration, embedding_dim: int) -> None:
    await conn.execute(RECORD, m.version, m.checksum)
    await conn.execute(
        """
        INSERT INTO engram_meta (key, value) VALUES ('embedding_dim', $1)
        ON CONFLICT (key) DO NOTHING
        """,
        str(embedding_dim),
    )


def check_order(
    pending: list[Migration], applied: dict[str, str], migrations: list[Migration]
) -> None:
    """Refuse pending files numbered below the highest applied migration.

    Versions applied that no file replaces any more (renamed ones) still count."""
    replaced = {old for m in migrations for old in m.replaces}
    numbers = [number_of(v) for v in applied if v not in replaced]
    if not pending or not numbers:
        return
    highest = max(numbers)
    late = [m.version for m in pending if m.number < highest]
    if late:
        top = max((v for v in applied if v not in replaced), key=number_of)
        raise ConfigError(
            f"migration(s) {', '.join(late)} are numbered below {top}, which this database "
            "has already applied: they would run out of order. Renumber them after the "
            f"highest file (next free number: {max(m.number for m in migrations) + 1:04d})."
        )


async def apply(url: str, embedding_dim: int) -> list[str]:
    """Connect to ``url``, apply the pending migrations, return their names."""
    conn = await connect(url, codecs=False)
    try:
        return await migrate(conn, embedding_dim=embedding_dim)
    finally:
        await conn.close()
