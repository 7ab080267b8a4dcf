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


PARTITIONED = {  # table: its primary key after 0170
    "messages": "PRIMARY KEY (user_id, id)",
    "memory_items": "PRIMARY KEY (user_id, id)",
    "episodes": "PRIMARY KEY (user_id, id)",
    "message_passages": "PRIMARY KEY (user_id, message_id, idx)",
}


async def test_0170_partitions_an_existing_database_by_user_and_keeps_every_row(infra, tmp_path):
    """A database from before 0170, with rows in every table it touches: after it,
    messages, memory_items, episodes and message_passages are 16 hash partitions by
    user with every index on each partition, no row lost, ids kept (and new ones above
    them), and every key and foreign key carrying the user: the same event of another
    user is another turn, a turn cannot point at another user's episode, deletes still
    cascade or null, erasing a user removes every row of theirs."""
    old = tmp_path / "old"
    shutil.copytree(MIGRATIONS_DIR, old)
    for later in old.glob("*.sql"):
        if later.name >= "0170":
            later.unlink()
    e_tim, e_ana, event = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    vec = "(array_fill(0.1, ARRAY[384]))::vector"
    async with fresh_database(infra) as conn:
        await migrate(conn, embedding_dim=384, directory=old)
        await conn.execute("INSERT INTO users (id) VALUES ('tim'), ('ana')")
        await conn.execute(
            "INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at) "
            "VALUES ($1, 'tim', 'p', 'c', now(), now()), ($2, 'ana', 'p', 'c', now(), now())",
            e_tim,
            e_ana,
        )
        ids = [
            await conn.fetchval(
                "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
                "content, occurred_at) VALUES ($1, $2, $3, 'p', 'c', 'user', $4, now()) "
                "RETURNING id",
                ev,
                user,
                ep,
                text,
            )
            for ev, user, ep, text in [
                (event, "tim", e_tim, "I moved to Lisbon"),
                (uuid.uuid4(), "tim", e_tim, "the cat is called Miso"),
                (uuid.uuid4(), "ana", e_ana, "hello"),
            ]
        ]
        for message_id, user, k in [(ids[1], "tim", 0), (ids[1], "tim", 1), (ids[2], "ana", 0)]:
            await conn.execute(
                "INSERT INTO message_passages (message_id, idx, user_id, start_char, end_char, "
                f"embedding, fts, speaker, turn_lexemes) VALUES ($1, $2, $3, 0, 5, {vec}, "
                "to_tsvector('english', 'the cat'), '', 2)",
                message_id,
                k,
                user,
            )
        first = await conn.fetchval(
            "INSERT INTO memory_items (user_id, type, content, source_message_id, episode_id) "
            "VALUES ('tim', 'fact', 'Lives in Lisbon', $1, $2) RETURNING id",
            ids[0],
            e_tim,
        )
        second = await conn.fetchval(
            "INSERT INTO memory_items (user_id, type, content, superseded_by, superseded_at) "
            "VALUES ('tim', 'fact', 'Lives in Porto', $1, now()) RETURNING id",
            first,
        )
        observation = await conn.fetchval(
            "INSERT INTO memory_items (user_id, type, category, key, content) "
            "VALUES ('tim', 'observation', 'observation', 'seed:x', 'Tim moves a lot') "
            "RETURNING id"
        )
        await conn.execute(
            "INSERT INTO observation_evidence (observation_id, memory_id, user_id) "
            "VALUES ($1, $2, 'tim'), ($1, $3, 'tim')",
            observation,
            first,
            second,
        )
        await conn.execute(
            "INSERT INTO fact_reviews (user_id, episode_id, content, reason) "
            "VALUES ('tim', $1, 'maybe', 'low confidence')",
            e_tim,
        )
        await conn.execute("INSERT INTO people (user_id, name) VALUES ('tim', 'Miso')")
        await conn.execute(
            "INSERT INTO episode_closes (event_id, user_id, provider, chat_id, closed_at) "
            "VALUES ($1, 'tim', 'p', 'c', now())",
            uuid.uuid4(),
        )
        stats = await conn.fetch("SELECT * FROM message_text_stats ORDER BY user_id, speaker")
        before = {
            t: await conn.fetch(f"SELECT * FROM {t} ORDER BY 1, 2")
            for t in [*PARTITIONED, "observation_evidence", "fact_reviews", "people"]
        }

        applied = await migrate(conn, embedding_dim=384)
        assert applied[0] == "0170_partition_by_user"

        for table, pk in PARTITIONED.items():
            kind = await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE oid = $1::regclass", table
            )
            assert kind == "p", table
            leaves = await conn.fetchval(
                "SELECT count(*) FROM pg_partition_tree($1::regclass) WHERE isleaf", table
            )
            assert leaves == 16
            # every index of the parent is on every partition (HNSW, GIN, trigram, btree)
            parent, leaf = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM pg_index WHERE indrelid = $1::regclass), "
                "(SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                " WHERE x.indrelid = ($1 || '_p07')::regclass AND i.relkind = 'i')",
                table,
            )
            assert parent == leaf >= 4, table
            got = await conn.fetchval(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = $1::regclass AND contype = 'p'",
                table,
            )
            assert got == pk
            assert await conn.fetch(f"SELECT * FROM {table} ORDER BY 1, 2") == before[table]
        for table in ("observation_evidence", "fact_reviews", "people"):
            assert await conn.fetch(f"SELECT * FROM {table} ORDER BY 1, 2") == before[table]
        # every unique key and foreign key of a per-user table names the user
        loose = await conn.fetch(
            """
            SELECT conrelid::regclass::text AS t, conname, pg_get_constraintdef(oid) AS def
            FROM pg_constraint c
            WHERE contype IN ('p', 'u', 'f') AND conrelid::regclass::text = ANY($1::text[])
              AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.conrelid
                              AND a.attnum = ANY(c.conkey) AND a.attname = 'user_id')
            """,
            [*PARTITIONED, "observation_evidence", "fact_reviews", "people", "episode_closes"],
        )
        assert [dict(r) for r in loose] == []
        for table in ("messages", "message_passages", "memory_items"):
            hnsw = await conn.fetchval(
                "SELECT count(*) FROM pg_indexes WHERE tablename LIKE $1 || '_p%' "
                "AND indexdef LIKE '%USING hnsw%'",
                table,
            )
            assert hnsw == 16, table
        trgm = await conn.fetchval(
            "SELECT count(*) FROM pg_indexes WHERE tablename LIKE 'memory_items_p%' "
            "AND indexdef LIKE '%gin_trgm_ops%'"
        )
        assert trgm == 16
        assert [r["id"] for r in await conn.fetch("SELECT id FROM messages ORDER BY id")] == ids
        after = await conn.fetch("SELECT * FROM message_text_stats ORDER BY user_id, speaker")
        assert after == stats

        # the same platform event: refused again for tim, another turn for ana
        insert = (
            "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
            "content, occurred_at) VALUES ($1, $2, $3, 'p', 'c', 'user', 'again', now()) "
            "RETURNING id"
        )
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.fetchval(insert, event, "tim", e_tim)
        new_id = await conn.fetchval(insert, event, "ana", e_ana)
        assert new_id > max(ids)
        assert (
            await conn.fetchval("SELECT turns FROM message_text_stats WHERE user_id = 'ana'") == 2
        )
        # a turn of ana's in tim's episode, ana's passage of tim's turn: the keys hold the user
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.fetchval(insert, uuid.uuid4(), "ana", e_tim)
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.execute(
                "INSERT INTO message_passages (message_id, idx, user_id, start_char, end_char, "
                f"embedding, fts) VALUES ($1, 5, 'ana', 0, 5, {vec}, ''::tsvector)",
                ids[0],
            )

        # ON DELETE SET NULL nulls only the reference, never the user
        await conn.execute("DELETE FROM messages WHERE id = $1", ids[0])
        assert (
            await conn.fetchval("SELECT source_message_id FROM memory_items WHERE id = $1", first)
            is None
        )
        await conn.execute("DELETE FROM memory_items WHERE id = $1", first)
        assert await conn.fetchval(
            "SELECT superseded_by IS NULL AND user_id = 'tim' FROM memory_items WHERE id = $1",
            second,
        )
        assert await conn.fetchval("SELECT count(*) FROM observation_evidence") == 1
        # erasing a user cascades through every partitioned table and what hangs off them
        await conn.execute("DELETE FROM users WHERE id = 'tim'")
        for table in (
            *PARTITIONED,
            "fact_reviews",
            "people",
            "episode_closes",
            "observation_evidence",
        ):
            assert await conn.fetchval(f"SELECT count(*) FROM {table} WHERE user_id = 'tim'") == 0
        assert await conn.fetchval("SELECT count(*) FROM messages WHERE user_id = 'ana'") == 2
        assert await conn.fetchval("SELECT count(*) FROM message_passages") == 1
        tim_stats = "SELECT turns FROM message_text_stats WHERE user_id = 'tim'"
        assert await conn.fetchval(tim_stats) in (None, 0)
