from shared.db import connect
from shared.migrate import load_migrations, migrate


async def test_migrations_run_twice_without_change(infra):
    conn = await connect(infra.database_url, codecs=False)
    try:
        assert await migrate(conn, embedding_dim=384) == []
        versions = [
            r["version"]
            for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
        ]
        assert versions == [m.version for m in load_migrations()]
    finally:
        await conn.close()


async def test_a_different_vector_dimension_is_refused(infra):
    from shared.errors import ConfigError

    conn = await connect(infra.database_url, codecs=False)
    try:
        try:
            await migrate(conn, embedding_dim=768)
        except ConfigError as exc:
            assert "384" in str(exc)
        else:
            raise AssertionError("a changed dimension must be refused")
    finally:
        await conn.close()


# --- order, renumbering and no-transaction files, each on a database of its own ---

import contextlib  # noqa: E402
import shutil  # noqa: E402
import uuid  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402
from pathlib import Path  # noqa: E402

import asyncpg  # noqa: E402
import pytest  # noqa: E402

from shared.errors import ConfigError  # noqa: E402
from shared.migrate import MIGRATIONS_DIR, statements  # noqa: E402


@contextlib.asynccontextmanager
async def fresh_database(infra) -> AsyncIterator[asyncpg.Connection]:
    name = f"mig_{uuid.uuid4().hex[:10]}"
    admin = await connect(infra.database_url, codecs=False)
    await admin.execute(f'CREATE DATABASE "{name}"')
    conn = await asyncpg.connect(infra.database_url, database=name)
    try:
        yield conn
    finally:
        await conn.close()
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


def _write(directory: Path, name: str, sql: str) -> None:
    (directory / f"{name}.sql").write_text(sql)


async def _versions(conn) -> list[str]:
    rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY applied_at, version")
    return [r["version"] for r in rows]


async def test_a_fresh_database_applies_every_file_in_number_order(infra):
    async with fresh_database(infra) as conn:
        applied = await migrate(conn, embedding_dim=384)
        assert applied == [m.version for m in load_migrations()]
        assert "0051_user_lexeme_index" in applied
        valid = await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = "
            "'memory_items_user_lexemes_idx'::regclass"
        )
        assert valid is True


async def test_a_database_that_applied_0022_after_0050_records_0051_without_rerunning(
    infra, tmp_path
):
    """The old order: 0022 ran after 0050 on databases that existed when it landed."""
    old = tmp_path / "old"
    shutil.copytree(MIGRATIONS_DIR, old)
    (old / "0051_user_lexeme_index.sql").unlink()
    async with fresh_database(infra) as conn:
        await migrate(conn, embedding_dim=384, directory=old)
        # what the old migrator did: run 0022 last, inside a transaction
        old_sql = (MIGRATIONS_DIR / "0051_user_lexeme_index.sql").read_text()
        body = ";\n".join(statements(old_sql)).replace(" CONCURRENTLY IF NOT EXISTS", "")
        async with conn.transaction():
            await conn.execute(body)
            await conn.execute(
                "INSERT INTO schema_migrations (version, checksum) VALUES ($1, 'old')",
                "0022_user_lexeme_index",
            )
        assert await migrate(conn, embedding_dim=384) == []
        versions = await _versions(conn)
        assert versions[-2:] == ["0022_user_lexeme_index", "0051_user_lexeme_index"]
        indexes = await conn.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'memory_items_user_lexemes_idx'"
        )
        assert indexes == 1
        assert await migrate(conn, embedding_dim=384) == []


async def test_a_pending_file_below_the_highest_applied_is_refused(infra, tmp_path):
    _write(tmp_path, "0001_a", "CREATE TABLE mig_a (id int);")
    _write(tmp_path, "0003_c", "CREATE TABLE mig_c (id int);")
    async with fresh_database(infra) as conn:
        assert await migrate(conn, embedding_dim=384, directory=tmp_path) == ["0001_a", "0003_c"]
        _write(tmp_path, "0002_b", "CREATE TABLE mig_b (id int);")
        _write(tmp_path, "0004_d", "CREATE TABLE mig_d (id int);")
        with pytest.raises(ConfigError) as err:
            await migrate(conn, embedding_dim=384, directory=tmp_path)
        message = str(err.value)
        assert "0002_b" in message and "0003_c" in message and "0005" in message
        # nothing ran: not the late file, not the one after it
        assert await conn.fetchval(
            "SELECT to_regclass('mig_b') IS NULL AND to_regclass('mig_d') IS NULL"
        )
        (tmp_path / "0002_b.sql").rename(tmp_path / "0005_b.sql")
        assert await migrate(conn, embedding_dim=384, directory=tmp_path) == ["0004_d", "0005_b"]


async def test_two_files_with_one_number_are_refused(tmp_path):
    _write(tmp_path, "0001_a", "SELECT 1;")
    _write(tmp_path, "0001_b", "SELECT 1;")
    with pytest.raises(ConfigError, match="share the number 1"):
        load_migrations(tmp_path)


async def test_a_no_transaction_file_can_build_an_index_concurrently(infra, tmp_path):
    _write(tmp_path, "0001_table", "CREATE TABLE mig_t (id int, note text);")
    _write(
        tmp_path,
        "0002_index",
        "-- migrate: no-transaction\n"
        "-- a comment; with a semicolon\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS mig_t_id ON mig_t (id);\n"
        "CREATE OR REPLACE FUNCTION mig_f() RETURNS text LANGUAGE sql AS $$ SELECT 'a;b' $$;\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS mig_t_note ON mig_t (note);\n",
    )
    _write(tmp_path, "0003_in_tx", "CREATE INDEX CONCURRENTLY mig_t_both ON mig_t (id, note);")
    async with fresh_database(infra) as conn:
        with pytest.raises(asyncpg.PostgresError, match="transaction block"):
            await migrate(conn, embedding_dim=384, directory=tmp_path)
        assert await _versions(conn) == ["0001_table", "0002_index"]
        assert await conn.fetchval("SELECT mig_f()") == "a;b"
        assert await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE tablename = 'mig_t'") == 2


async def test_0110_merges_live_duplicates_and_moves_confidence_to_0_1(infra, tmp_path):
    """A database with duplicates from before migration 0110: the oldest stays and counts
    the others, which are kept as merged with an audit line each; keyed facts and
    episodes are left alone; saved confidences move from 0-100 to 0-1."""
    old = tmp_path / "old"
    shutil.copytree(MIGRATIONS_DIR, old)
    for later in old.glob("*.sql"):  # the schema as it was before 0110
        if later.name >= "0110":
            later.unlink()
    async with fresh_database(infra) as conn:
        await migrate(conn, embedding_dim=384, directory=old)
        await conn.execute("INSERT INTO users (id) VALUES ('tim'), ('ana')")
        rows = [
            ("tim", "fact", None, None, "Likes tea", 90.0, 3),
            ("tim", "fact", None, None, "likes tea.", None, 2),
            ("tim", "preference", None, None, "  LIKES  tea ", 0.7, 1),
            ("ana", "fact", None, None, "Likes tea", None, 1),  # another user
            ("tim", "episode", None, None, "clicked save", None, 2),  # occurrences
            ("tim", "episode", None, None, "clicked save", None, 1),
            ("tim", "fact", "drink", "morning", "Likes tea", 80.0, 1),  # a keyed fact
        ]
        for user, type_, category, key, content, confidence, days in rows:
            await conn.execute(
                "INSERT INTO memory_items (user_id, type, category, key, content, confidence, "
                "created_at) VALUES ($1, $2, $3, $4, $5, $6, now() - make_interval(days => $7))",
                user,
                type_,
                category,
                key,
                content,
                confidence,
                days,
            )
        applied = await migrate(conn, embedding_dim=384)
        # from 0110 on (later migrations follow it, in order)
        assert applied[:3] == [
            "0110_memory_confirmations",
            "0120_graph_checkpoints",
            "0130_webhooks",
        ]
        assert applied == sorted(applied)
        live = await conn.fetch(
            "SELECT user_id, type, content, confirmations, jsonb_array_length(sources) AS n, "
            "confidence FROM memory_items WHERE status = 'active' ORDER BY user_id, content, type"
        )
        assert sorted((r["user_id"], r["content"], r["confirmations"], r["n"]) for r in live) == [
            ("ana", "Likes tea", 0, 0),
            ("tim", "Likes tea", 0, 0),  # the keyed fact
            ("tim", "Likes tea", 2, 2),  # the oldest of the three
            ("tim", "clicked save", 0, 0),
            ("tim", "clicked save", 0, 0),
        ]
        assert sorted(r["confidence"] or 0 for r in live) == pytest.approx([0, 0, 0, 0.8, 0.9])
        merged = await conn.fetch(
            "SELECT m.id, m.superseded_by, a.details FROM memory_items m "
            "JOIN audit_log a ON a.entity_id = m.id::text AND a.action = 'merge' "
            "WHERE m.status = 'merged'"
        )
        assert len(merged) == 2
        keeper = await conn.fetchval(
            "SELECT id FROM memory_items WHERE user_id = 'tim' AND confirmations = 2"
        )
        assert {r["superseded_by"] for r in merged} == {keeper}
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "INSERT INTO memory_items (user_id, type, content) "
                "VALUES ('tim', 'fact', 'LIKES TEA')"
            )
