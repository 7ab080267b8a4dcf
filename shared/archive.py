"""A user's whole memory as a portable archive: export, and the matching import.

The archive is a zip (format ``engram-archive``, :data:`VERSION`) holding
``manifest.json`` and one ``tables/<table>.jsonl`` per table, one row a line, in
the order they must be imported (a table after the tables it references). The
format is documented in ``docs/archive.md``.

What goes in is found, not listed: every table with a ``user_id`` column, less
:data:`NOT_EXPORTED` (each with its reason), so a table added by a later
migration travels without a change here (a test fails until it is classified).
Of each row, every stored column goes in except

- generated columns (the full-text vectors: recomputed on import),
- vectors and their bookkeeping (:data:`EMBEDDING_COLUMNS`): the target embeds
  the rows again with its own model, in the background, with progress,
- secrets (:data:`SECRET_COLUMNS`, and any ``bytea``): settings travel without keys.

Import writes every table in one transaction under the user's erasure lock (an
erased id is refused), skips rows it already has (so importing twice changes
nothing), refuses an archive of a newer :data:`VERSION`, and refuses rows whose
ids belong to another user. Identity ids (``messages.id``) are given anew by the
target and every reference to them is remapped through the row's natural key
(:data:`NATURAL_KEYS`); self references (``superseded_by``) are set once every
row of the table is in.
"""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

import asyncpg

from shared.db import Conn, audit
from shared.erasure import audit_hash, hold_users, refuse_erased
from shared.errors import InvalidRequest
from shared.events import EmbedKind
from shared.memory.writer import DEFAULT_THEME, MEMORY_TYPES

FORMAT = "engram-archive"
VERSION = 1
MANIFEST = "manifest.json"

# Per-user tables that stay behind, and why.
NOT_EXPORTED: dict[str, str] = {
    "api_keys": "credentials do not travel: the target deployment issues its own keys",
    "message_text_stats": "derived: triggers on messages rebuild it as the turns are imported",
    "message_postings": "derived: triggers on messages and message_passages rebuild it as "
    "the turns are imported and their passages embedded",
    "message_shapes": "derived: triggers on messages rebuild it as the turns are imported",
    "vector_index_users": "derived: the embedder lists a big user for the HNSW index again",
    "message_postings_users": "derived: the embedder lists a big user's postings again",
    "message_word_counts": "derived: the embedder counts a big user's common words again",
    "embedding_rebuilds": "operational: the import starts its own re-embedding",
    "episode_closes": "transient: an episode close waiting for its turns inside ingest",
    "webhook_subscriptions": "secrets: a deployment's subscriptions are made on it anew",
    "webhook_events": "operational: the outbox of this deployment's deliveries",
    "webhook_deliveries": "operational: the outbox of this deployment's deliveries",
    "message_passages": "derived: the embedder cuts and embeds a long turn's passages again "
    "as the import re-embeds its turns",
    "consolidation_state": "operational: the target's consolidation runs on its own schedule",
}

EMBEDDING_COLUMNS = frozenset(
    {
        "embedding",
        "embedding_state",
        "embedding_error",
        "embedding_provider",
        "embedding_model",
        "embedding_dims",
        "embedded_at",
        "embedding_attempts",
        "embedding_retry_at",
        "vector_indexed",
    }
)
SECRET_COLUMNS: dict[str, frozenset[str]] = {"embedding_settings": frozenset({"api_key_enc"})}

# Tables whose id the target gives anew: the column other rows find them by.
NATURAL_KEYS: dict[str, str] = {"messages": "event_id"}

# Settings rows are imported only when asked (the target's provider is the default).
SETTINGS_TABLES = frozenset({"embedding_settings"})

BATCH = 2000
PROGRESS_EVERY = 5000

Progress = Callable[[str, int], None]
"""Told ``(table, rows)`` as rows are written or imported."""

_TABLES = """
SELECT c.table_name
FROM information_schema.columns c
JOIN information_schema.tables t
  ON t.table_schema = c.table_schema AND t.table_name = c.table_name
WHERE c.table_schema = current_schema() AND c.column_name = 'user_id'
  AND t.table_type = 'BASE TABLE'
  -- a partition's rows are its partitioned table's (migration 0170)
  AND NOT (SELECT r.relispartition FROM pg_class r
           WHERE r.oid = format('%I.%I', c.table_schema, c.table_name)::regclass)
ORDER BY c.table_name
"""

_COLUMNS = """
SELECT a.attrelid::regclass::text AS table_name, a.attname AS name,
       format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
       a.attgenerated <> '' AS generated, a.attidentity = 'a' AS identity_always
FROM pg_attribute a
WHERE a.attrelid = ANY($1::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""

_FOREIGN_KEYS = """
SELECT c.conrelid::regclass::text AS table_name, c.confrelid::regclass::text AS ref_table,
       (SELECT array_agg(a.attname ORDER BY k.i) FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n) AS columns,
       (SELECT array_agg(a.attname ORDER BY k.i) FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
        JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n) AS ref_columns
FROM pg_constraint c
WHERE c.contype = 'f' AND c.conrelid = ANY($1::regclass[])
"""

_PRIMARY_KEYS = """
SELECT c.conrelid::regclass::text AS table_name,
       (SELECT array_agg(a.attname ORDER BY k.i) FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n) AS columns
FROM pg_constraint c
WHERE c.contype = 'p' AND c.conrelid = ANY($1::regclass[])
"""

_SCHEMA_VERSION = "SELECT max(version) FROM schema_migrations"


@dataclass(frozen=True)
class ForeignKey:
    column: str
    ref_table: str
    ref_column: str


@dataclass
class Table:
    """One exported table as this database has it."""

    name: str
    columns: list[str]  # exported, in table order
    insertable: set[str]  # what an import may write (no generated or identity column)
    not_null: set[str]
    left_out: list[str]  # stored columns that stay behind (generated, vectors, secrets)
    primary_key: list[str]
    foreign_keys: list[ForeignKey] = field(default_factory=list)
    # what names a row across users: the primary key, or for a key (user_id, id) of a
    # generated or uuid id (the partitioned tables, migration 0170) the id alone
    row_key: list[str] = field(default_factory=list)

    @property
    def identity(self) -> str | None:
        """The row's id column the target gives anew (remapped), if any."""
        if len(self.row_key) == 1 and self.row_key[0] not in self.insertable:
            return self.row_key[0]
        return None

    @property
    def self_refs(self) -> list[ForeignKey]:
        return [fk for fk in self.foreign_keys if fk.ref_table == self.name]


async def user_tables(conn: Conn) -> list[str]:
    """Every table with a ``user_id`` column (exported or not)."""
    return [r["table_name"] for r in await conn.fetch(_TABLES)]


async def describe(conn: Conn) -> list[Table]:
    """The exported tables in import order (referenced tables first), ``users`` first."""
    names = ["users"] + [t for t in await user_tables(conn) if t not in NOT_EXPORTED]
    columns: dict[str, list[Any]] = defaultdict(list)
    for r in await conn.fetch(_COLUMNS, names):
        columns[r["table_name"]].append(r)
    keys = {r["table_name"]: list(r["columns"]) for r in await conn.fetch(_PRIMARY_KEYS, names)}
    tables: dict[str, Table] = {}
    for name in names:
        secret = SECRET_COLUMNS.get(name, frozenset())
        cols = [
            c["name"]
            for c in columns[name]
            if not c["generated"]
            and c["name"] not in EMBEDDING_COLUMNS
            and c["name"] not in secret
            and c["type"] != "bytea"
            and not c["type"].startswith(("vector", "halfvec", "sparsevec"))
        ]
        insertable = {
            c["name"] for c in columns[name] if c["name"] in cols and not c["identity_always"]
        }
        not_null = {c["name"] for c in columns[name] if c["not_null"]}
        left_out = [c["name"] for c in columns[name] if c["name"] not in cols]
        pk = keys.get(name, [])
        own = [k for k in pk if k != "user_id"]
        types = {c["name"]: c for c in columns[name]}
        row_key = (
            own
            if len(pk) == 2
            and len(own) == 1
            and (types[own[0]]["type"] == "uuid" or types[own[0]]["identity_always"])
            else pk
        )
        tables[name] = Table(name, cols, insertable, not_null, left_out, pk, row_key=row_key)
    for r in await conn.fetch(_FOREIGN_KEYS, names):
        if r["ref_table"] not in tables:
            continue
        pairs = [
            (c, rc) for c, rc in zip(r["columns"], r["ref_columns"], strict=True) if c != "user_id"
        ]
        # (user_id, x) -> (user_id, y): the user is the importing one; x points at y
        if len(pairs) == 1 and len(r["columns"]) - len(pairs) in (0, 1):
            tables[r["table_name"]].foreign_keys.append(
                ForeignKey(pairs[0][0], r["ref_table"], pairs[0][1])
            )
    return _in_import_order(tables)


def _in_import_order(tables: dict[str, Table]) -> list[Table]:
    done: list[Table] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in seen:
            return
        if name in path:
            raise RuntimeError(f"archive: a cycle of foreign keys through {name}")
        for fk in tables[name].foreign_keys:
            if fk.ref_table != name:
                visit(fk.ref_table, (*path, name))
        seen.add(name)
        done.append(tables[name])

    for name in tables:
        visit(name, ())
    return done


# --------------------------------------------------------------------------- export


@dataclass
class Manifest:
    user_id: str
    exported_at: str
    schema: str | None
    tables: dict[str, int]  # rows per table, in import order
    columns: dict[str, list[str]]
    format: str = FORMAT
    version: int = VERSION

    def as_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "version": self.version,
            "user_id": self.user_id,
            "exported_at": self.exported_at,
            "schema": self.schema,
            "tables": self.tables,
            "columns": self.columns,
        }


async def export_user(
    conn: Conn, user_id: str, out: IO[bytes], *, progress: Progress | None = None
) -> Manifest:
    """Write ``user_id``'s archive to ``out`` (a file opened for binary writing).

    Reads every table in one repeatable-read snapshot, row by row through a cursor;
    ``progress(table, rows)`` is told the rows written as they go."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        if not await conn.fetchval("SELECT 1 FROM users WHERE id = $1", user_id):
            raise InvalidRequest("no such user: nothing to export")
        tables = await describe(conn)
        manifest = Manifest(
            user_id=user_id,
            exported_at=datetime.now(UTC).isoformat(),
            schema=await conn.fetchval(_SCHEMA_VERSION),
            tables={},
            columns={},
        )
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for table in tables:
                key = "id" if table.name == "users" else "user_id"
                order = ", ".join(table.primary_key or table.columns[:1])
                sql = (
                    f"SELECT to_jsonb(t) - $2::text[] AS r "
                    f"FROM {table.name} t WHERE {key} = $1 ORDER BY {order}"
                )
                n = 0
                with zf.open(f"tables/{table.name}.jsonl", "w") as f:
                    async for rec in conn.cursor(sql, user_id, table.left_out, prefetch=500):
                        f.write(json.dumps(rec["r"], ensure_ascii=False).encode() + b"\n")
                        n += 1
                        if progress is not None and n % PROGRESS_EVERY == 0:
                            progress(table.name, PROGRESS_EVERY)
                if progress is not None and n % PROGRESS_EVERY:
                    progress(table.name, n % PROGRESS_EVERY)
                manifest.tables[table.name] = n
                manifest.columns[table.name] = table.columns
            zf.writestr(MANIFEST, json.dumps(manifest.as_json(), indent=2))
    return manifest


# --------------------------------------------------------------------------- import


@dataclass
class TableResult:
    rows: int = 0
    inserted: int = 0
    skipped: int = 0  # already there (a second import), or a unique value the user has


@dataclass
class ImportResult:
    user_id: str
    source_user_id: str
    tables: dict[str, TableResult]
    # rows to embed again, by embed kind: messages, memories, episode summaries
    to_embed: dict[EmbedKind, list[Any]]
    dropped_columns: dict[str, list[str]]  # in the archive, unknown to this schema

    @property
    def inserted(self) -> int:
        return sum(t.inserted for t in self.tables.values())


def read_manifest(zf: zipfile.ZipFile) -> dict[str, Any]:
    try:
        manifest: Any = json.loads(zf.read(MANIFEST))
    except KeyError:
        raise InvalidRequest("not an engram archive: it has no manifest.json") from None
    except ValueError:
        raise InvalidRequest("not an engram archive: manifest.json is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InvalidRequest(f"not an engram archive: its format is not {FORMAT!r}")
    version = manifest.get("version")
    if not isinstance(version, int) or version < 1:
        raise InvalidRequest("archive: its version is not a positive whole number")
    if version > VERSION:
        raise InvalidRequest(
            f"archive version {version} is newer than this engram reads ({VERSION}): "
            "upgrade engram, then import it"
        )
    if not isinstance(manifest.get("user_id"), str) or not isinstance(manifest.get("tables"), dict):
        raise InvalidRequest("archive: manifest.json lacks user_id or tables")
    return manifest


def open_archive(data: bytes | IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data)
    except zipfile.BadZipFile:
        raise InvalidRequest("not an engram archive: not a zip file") from None


async def import_user(
    conn: Conn,
    archive: zipfile.ZipFile,
    *,
    user_id: str | None = None,
    with_settings: bool = False,
    actor: str = "admin",
    progress: Progress | None = None,
) -> ImportResult:
    """Import an archive into this database, as ``user_id`` (default: the archive's user).

    One transaction; safe to run twice (the second inserts nothing)."""
    manifest = read_manifest(archive)
    source = manifest["user_id"]
    target = user_id or source
    result = ImportResult(target, source, {}, defaultdict(list), {})
    async with conn.transaction():
        if await hold_users(conn, [target]):  # the erasure's lock, then its tombstone
            await refuse_erased(conn, target)
        remap: dict[str, dict[Any, Any]] = {}
        for table in await describe(conn):
            if table.name not in manifest["tables"]:
                continue
            if table.name in SETTINGS_TABLES and not with_settings:
                continue
            rows = list(_rows(archive, table.name))
            unknown = sorted({k for r in rows for k in r} - set(table.columns))
            if unknown:
                result.dropped_columns[table.name] = unknown
            tr = result.tables[table.name] = TableResult(rows=len(rows))
            for i in range(0, len(rows), BATCH):
                try:
                    async with conn.transaction():  # a savepoint: the error is ours to name
                        await _insert(conn, table, rows[i : i + BATCH], target, remap, tr, result)
                except (asyncpg.DataError, asyncpg.IntegrityConstraintViolationError) as exc:
                    what = str(exc).splitlines()[0][:200]
                    raise InvalidRequest(
                        f"archive: tables/{table.name}.jsonl, rows {i + 1}-{i + BATCH}: "
                        f"{type(exc).__name__}: {what}"
                    ) from None
                if progress is not None:
                    progress(table.name, len(rows[i : i + BATCH]))
            for fk in table.self_refs:
                await _set_self_refs(conn, table, fk, rows, target)
        await _episode_summaries_pending(conn, target, result)
        await audit(
            conn,
            user_id=target,
            actor=actor,
            action="import",
            entity="user",
            entity_id=target,
            details={
                "archive_user": audit_hash(source),
                "exported_at": manifest.get("exported_at"),
                "inserted": {k: v.inserted for k, v in result.tables.items()},
            },
        )
    result.to_embed = dict(result.to_embed)
    return result


def _rows(archive: zipfile.ZipFile, table: str) -> Iterable[dict[str, Any]]:
    try:
        f = archive.open(f"tables/{table}.jsonl")
    except KeyError:
        raise InvalidRequest(
            f"archive: the manifest lists {table} but its file is missing"
        ) from None
    with f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except ValueError:
                raise InvalidRequest(
                    f"archive: tables/{table}.jsonl line {n} is not JSON"
                ) from None
            if not isinstance(row, dict):
                raise InvalidRequest(f"archive: tables/{table}.jsonl line {n} is not an object")
            yield row


EMBED_KINDS: dict[str, EmbedKind] = {"messages": "message", "memory_items": "memory"}


async def _insert(
    conn: Conn,
    table: Table,
    rows: list[dict[str, Any]],
    target: str,
    remap: dict[str, dict[Any, Any]],
    tr: TableResult,
    result: ImportResult,
) -> None:
    owner = "id" if table.name == "users" else "user_id"
    self_cols = {fk.column for fk in table.self_refs}
    # the columns the archive carries (a column it lacks takes this schema's default)
    present = {k for row in rows for k in row} | {owner}
    cols = [c for c in table.columns if c in table.insertable and c in present]
    prepared = []
    for row in rows:
        r = {k: v for k, v in row.items() if k in table.insertable}
        r[owner] = target
        for fk in table.foreign_keys:
            if fk.column in self_cols:
                r[fk.column] = None  # set once every row of the table is in
            elif fk.ref_table in remap and r.get(fk.column) is not None:
                # a reference to a row whose id the target gave anew (None: not imported)
                r[fk.column] = remap[fk.ref_table].get(r[fk.column])
        prepared.append(r)
    col_list = ", ".join(cols)
    natural = NATURAL_KEYS.get(table.name)
    # the ids (or, for ids given anew, the natural keys) travel: refuse those another
    # user already holds here
    keys = [natural] if table.identity is not None and natural else table.row_key
    if keys and owner not in keys:
        on = " AND ".join(f"t.{k} = r.{k}" for k in keys)
        taken = await conn.fetchval(
            f"""SELECT count(*) FROM {table.name} t
                JOIN jsonb_populate_recordset(NULL::{table.name}, $1::jsonb) r ON {on}
                WHERE t.{owner} <> $2""",
            prepared,
            target,
        )
        if taken:
            raise InvalidRequest(
                f"archive: {taken} row(s) of {table.name} have ids that belong to another "
                "user here; import into another deployment, or as the archive's own user"
            )
    returning = table.identity or (table.row_key[0] if table.row_key else None)
    if table.identity is not None and natural is None:
        # no key to recognise a row by (the audit log): skip rows equal to one there
        sql = f"""
            INSERT INTO {table.name} ({col_list})
            SELECT {col_list} FROM jsonb_populate_recordset(NULL::{table.name}, $1::jsonb) r
            WHERE NOT EXISTS (SELECT 1 FROM {table.name} t WHERE {_same_row(table, cols)})
            RETURNING {returning}
        """
    else:
        sql = f"""
            INSERT INTO {table.name} ({col_list})
            SELECT {col_list} FROM jsonb_populate_recordset(NULL::{table.name}, $1::jsonb)
            ON CONFLICT DO NOTHING
            RETURNING {returning or "1"}
        """
    inserted = await conn.fetch(sql, prepared)
    tr.inserted += len(inserted)
    tr.skipped += len(rows) - len(inserted)
    if table.identity is not None and natural is not None:
        # the target's id for each archive id, through the natural key
        by_key = {
            r[natural]: r[table.identity]
            for r in await conn.fetch(
                f"""SELECT t.{table.identity}, t.{natural}::text AS {natural}
                    FROM jsonb_populate_recordset(NULL::{table.name}, $2::jsonb) r
                    JOIN {table.name} t ON t.{natural} = r.{natural}
                    WHERE t.{owner} = $1""",
                target,
                [{natural: r.get(natural)} for r in rows],
            )
        }
        ids = remap.setdefault(table.name, {})
        for row in rows:
            if table.identity in row and str(row.get(natural)) in by_key:
                ids[row[table.identity]] = by_key[str(row.get(natural))]
    kind = EMBED_KINDS.get(table.name)
    if kind is not None and returning is not None:
        result.to_embed[kind].extend(r[returning] for r in inserted)


def _same_row(table: Table, cols: list[str]) -> str:
    return " AND ".join(
        f"t.{c} = r.{c}" if c in table.not_null else f"t.{c} IS NOT DISTINCT FROM r.{c}"
        for c in cols
    )


async def _set_self_refs(
    conn: Conn, table: Table, fk: ForeignKey, rows: list[dict[str, Any]], target: str
) -> None:
    pairs = [
        {fk.ref_column: r[fk.ref_column], fk.column: r[fk.column]}
        for r in rows
        if r.get(fk.column) is not None and fk.ref_column in r
    ]
    if not pairs:
        return
    await conn.execute(
        f"""UPDATE {table.name} t SET {fk.column} = r.{fk.column}
            FROM jsonb_populate_recordset(NULL::{table.name}, $1::jsonb) r
            WHERE t.{fk.ref_column} = r.{fk.ref_column} AND t.user_id = $2
              AND t.{fk.column} IS NULL
              AND EXISTS (SELECT 1 FROM {table.name} x
                          WHERE x.{fk.ref_column} = r.{fk.column} AND x.user_id = $2)""",
        pairs,
        target,
    )


async def _episode_summaries_pending(conn: Conn, target: str, result: ImportResult) -> None:
    """Episode summaries imported without a vector are embedded like the rest."""
    rows = await conn.fetch(
        """UPDATE episodes SET embedding_state = 'pending'
           WHERE user_id = $1 AND summary_text IS NOT NULL AND embedding IS NULL
             AND embedding_state IS NULL
           RETURNING id""",
        target,
    )
    result.to_embed["episode"].extend(r["id"] for r in rows)


# --------------------------------------------------------------------------- mem0


def from_mem0(data: Any, *, user_id: str | None = None) -> zipfile.ZipFile:
    """An archive made from mem0's export of memories, so it imports the way an engram
    archive does (one import path: idempotent, re-embedded by the target's model).

    Takes what ``Memory.get_all()`` / ``MemoryClient.get_all()`` return: a list of
    memories, or ``{"results": [...]}`` (also ``{"memories": [...]}``); a memory is
    ``{"id", "memory", "user_id", "hash", "metadata", "categories", "created_at",
    "updated_at", "agent_id", "run_id"}``, of which only ``memory`` is required. Each
    becomes a memory item (type ``metadata.type`` when it is one of engram's, else
    ``fact``; categories as tags) that keeps its id (a non-UUID id is mapped to a stable
    UUID), its times, and mem0's own fields under ``data.mem0``. An export holding several
    users needs ``user_id`` to say whose memories to take."""
    items = data.get("results", data.get("memories")) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InvalidRequest("mem0 export: expected a list of memories or {'results': [...]}")
    owners = {m.get("user_id") for m in items if isinstance(m, dict) and m.get("user_id")}
    if user_id is None:
        if len(owners) != 1:
            raise InvalidRequest(
                f"mem0 export: it holds memories of {len(owners)} users; name the one to "
                "import (its user_id)"
            )
        user_id = str(owners.pop())
    rows: list[dict[str, Any]] = []
    now = datetime.now(UTC).isoformat()
    for n, m in enumerate(items):
        if not isinstance(m, dict):
            raise InvalidRequest(f"mem0 export: memory {n} is not an object")
        if m.get("user_id") not in (None, user_id):
            continue
        text = m.get("memory", m.get("data", m.get("text")))
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest(f"mem0 export: memory {n} has no 'memory' text")
        meta: dict[str, Any] = m["metadata"] if isinstance(m.get("metadata"), dict) else {}
        kind = meta["type"] if meta.get("type") in MEMORY_TYPES else "fact"
        categories: list[Any] = m["categories"] if isinstance(m.get("categories"), list) else []
        created = m.get("created_at") or now
        rows.append(
            {
                "id": _uuid_of(m.get("id"), user_id, text),
                "user_id": user_id,
                "type": kind,
                "theme": DEFAULT_THEME,
                "content": text,
                "tags": [str(c) for c in categories],
                "source": "mem0",
                "data": {
                    "mem0": {
                        k: m[k]
                        for k in ("id", "hash", "metadata", "agent_id", "run_id")
                        if m.get(k) is not None
                    }
                },
                "created_at": created,
                "updated_at": m.get("updated_at") or created,
            }
        )
    first = min((r["created_at"] for r in rows), default=now)
    tables = {
        "users": [{"id": user_id, "created_at": first, "updated_at": first}],
        "themes": [{"user_id": user_id, "slug": DEFAULT_THEME, "display_name": "General"}],
        "memory_items": rows,
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, table_rows in tables.items():
            zf.writestr(
                f"tables/{name}.jsonl",
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in table_rows),
            )
        manifest = Manifest(
            user_id=user_id,
            exported_at=now,
            schema=None,
            tables={k: len(v) for k, v in tables.items()},
            columns={k: sorted({c for r in v for c in r}) for k, v in tables.items()},
        )
        zf.writestr(MANIFEST, json.dumps({**manifest.as_json(), "source": "mem0"}, indent=2))
    return zipfile.ZipFile(io.BytesIO(buf.getvalue()))


def _uuid_of(value: Any, user_id: str, text: str) -> str:
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"mem0:{user_id}:{value if value else text}"))
