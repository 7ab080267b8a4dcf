"""A user's archive (shared/archive.py) on real PostgreSQL: export, import into an empty
database, every row equal; a second import changes nothing; what is refused, and why."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
import zipfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import numpy as np
import pytest

from services.ingest.service import store_turns
from shared import archive
from shared.db import connect
from shared.erasure import begin_erasure
from shared.errors import InvalidRequest, UserErased
from shared.events import TurnReceived
from shared.memory.writer import NewItem, insert_items
from shared.migrate import migrate
from shared.streams import Publisher

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@contextlib.asynccontextmanager
async def empty_database(infra: Any) -> AsyncIterator[str]:
    """Another engram database on the same server, migrated and empty: its URL."""
    name = f"archive_{uuid.uuid4().hex[:10]}"
    admin = await connect(infra.database_url, codecs=False)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        raw = await asyncpg.connect(infra.database_url, database=name)
        try:
            await migrate(raw, embedding_dim=384)
        finally:
            await raw.close()
        yield urlsplit(infra.database_url)._replace(path=f"/{name}").geturl()
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


@contextlib.asynccontextmanager
async def empty_deployment(infra: Any) -> AsyncIterator[asyncpg.Connection]:
    """A connection to an empty database of its own."""
    async with empty_database(infra) as url:
        conn = await connect(url)
        try:
            yield conn
        finally:
            await conn.close()


def turns_of(user_id: str) -> list[TurnReceived]:
    return [
        TurnReceived(
            user_id=user_id,
            display_name="Ada",
            provider="cli",
            chat_id=chat,
            role=role,
            content=text,
            occurred_at=T0 + timedelta(minutes=i),
            external_message_id=f"{chat}-{i}",
        )
        for i, (chat, role, text) in enumerate(
            [
                ("c1", "user", "We adopted a greyhound named Biscuit."),
                ("c1", "assistant", "Congratulations on Biscuit!"),
                ("c2", "user", "The launch moved to May 4."),
                ("c2", "assistant", "Noted: launch on May 4."),
            ]
        )
    ]


async def seed(pool: asyncpg.Pool, redis: Any, settings: Any, user_id: str) -> None:
    """A user with something in every exported table, written by the real write paths
    where there is one."""
    turns = turns_of(user_id)
    result = await store_turns(
        pool, Publisher(redis, settings), turns, stale_window=timedelta(minutes=30)
    )
    assert not result.refused
    message_id = await pool.fetchval(
        "SELECT id FROM messages WHERE user_id = $1 ORDER BY id LIMIT 1", user_id
    )
    episode_id = await pool.fetchval("SELECT episode_id FROM messages WHERE id = $1", message_id)
    person = await pool.fetchval(
        "INSERT INTO people (user_id, name, relation, aliases) "
        "VALUES ($1, 'Biscuit', 'dog', '{Biscy}') RETURNING id",
        user_id,
    )
    async with pool.acquire() as conn:
        written = await insert_items(
            conn,
            user_id,
            [
                NewItem(
                    type="fact",
                    content="Ada adopted a greyhound named Biscuit",
                    theme="pets",
                    subjects=[person],
                    source_message_id=message_id,
                    episode_id=episode_id,
                    confidence=0.9,
                ),
                NewItem(type="fact", content="The launch is on April 20", theme="work"),
                NewItem(type="fact", content="The launch is on May 4", theme="work"),
                NewItem(
                    type="preference",
                    content="home city",
                    category="location",
                    key="home_city",
                    data={"value": "Bergen", "nested": {"a": [1, 2]}},
                ),
            ],
            actor="test",
        )
    old, new = written.items[1].id, written.items[2].id
    await pool.execute(
        "UPDATE memory_items SET superseded_by = $2, superseded_at = now(), "
        "status = 'archived' WHERE id = $1",
        old,
        new,
    )
    # one row embedded: its vector stays behind, the target embeds it again
    await pool.execute(
        "UPDATE memory_items SET embedding = $2, embedding_state = 'ready' WHERE id = $1",
        new,
        np.ones(384, dtype=np.float32) / np.sqrt(384),
    )
    await pool.execute(
        "UPDATE episodes SET summary_text = 'Biscuit arrived', summary = $2 WHERE id = $1",
        episode_id,
        {"title": "Biscuit"},
    )
    await pool.execute(
        "INSERT INTO checkpoints (user_id, thread_id, checkpoint_id, parent_id, step, state) "
        "VALUES ($1, 't1', 'k1', NULL, 0, $2), ($1, 't1', 'k2', 'k1', 1, $3)",
        user_id,
        {"messages": []},
        {"messages": ["hi"]},
    )
    await pool.execute(
        "INSERT INTO user_summaries (user_id, summary, fact_count) VALUES ($1, 'Ada, Bergen', 2)",
        user_id,
    )
    await pool.execute(
        "INSERT INTO fact_reviews (user_id, episode_id, content, reason) "
        "VALUES ($1, $2, 'maybe likes tea', 'low confidence')",
        user_id,
        episode_id,
    )
    await pool.execute(
        "INSERT INTO embedding_settings (user_id, provider, endpoint_url, model, api_key_enc) "
        "VALUES ($1, 'openai', 'https://example.invalid/v1', 'text-embedding-3-small', "
        "'\\x0badc0ffee'::bytea)",
        user_id,
    )


def export_bytes_of(manifest_and_buf: tuple[Any, io.BytesIO]) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(manifest_and_buf[1].getvalue()))


async def export(conn: Any, user_id: str) -> tuple[archive.Manifest, zipfile.ZipFile]:
    buf = io.BytesIO()
    async with _conn(conn) as c:
        manifest = await archive.export_user(c, user_id, buf)
    return manifest, zipfile.ZipFile(io.BytesIO(buf.getvalue()))


@contextlib.asynccontextmanager
async def _conn(conn: Any) -> AsyncIterator[Any]:
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as c:
            yield c
    else:
        yield conn


def table_rows(zf: zipfile.ZipFile, table: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in zf.read(f"tables/{table}.jsonl").splitlines()]


def comparable(zf: zipfile.ZipFile) -> dict[str, list[str]]:
    """Every row as canonical JSON; message ids (given anew by the target) replaced by
    their event ids; the audit log without its ids and without the import's own line."""
    events = {r["id"]: r["event_id"] for r in table_rows(zf, "messages")}
    out: dict[str, list[str]] = {}
    for table in json.loads(zf.read("manifest.json"))["tables"]:
        rows = table_rows(zf, table)
        for r in rows:
            if table == "messages":
                r.pop("id")
            if table == "memory_items" and r.get("source_message_id") is not None:
                r["source_message_id"] = events[r["source_message_id"]]
            if table == "audit_log":
                r.pop("id")
        if table == "audit_log":
            rows = [r for r in rows if r["action"] != "import"]
        out[table] = sorted(json.dumps(r, sort_keys=True) for r in rows)
    return out


async def test_export_then_import_into_an_empty_deployment_gives_every_row_back(
    pool, redis, settings, infra, user_id
):
    await seed(pool, redis, settings, user_id)
    manifest, zf = await export(pool, user_id)
    assert manifest.tables["messages"] == 4
    assert manifest.tables["memory_items"] == 4
    assert manifest.tables["checkpoints"] == 2
    # no vectors, no secrets, no generated columns in the archive
    for table, columns in manifest.columns.items():
        assert not {"embedding", "fts", "api_key_enc", "summary_fts"} & set(columns), table
    assert "0badc0ffee" not in zf.read("tables/embedding_settings.jsonl").decode()
    async with empty_deployment(infra) as target:
        done = await archive.import_user(target, zf, with_settings=True)
        assert done.tables["messages"].inserted == 4
        assert done.tables["memory_items"].inserted == 4
        # the rows wait for the target's model: messages, memories and the summary
        assert len(done.to_embed["message"]) == 4
        assert len(done.to_embed["memory"]) == 4
        assert len(done.to_embed["episode"]) == 1
        pending = await target.fetchval(
            "SELECT count(*) FROM memory_items WHERE user_id = $1 AND embedding IS NULL "
            "AND embedding_state = 'pending'",
            user_id,
        )
        assert pending == 4
        # the reference to a message follows it to its new id
        linked = await target.fetchval(
            "SELECT m.content FROM memory_items i JOIN messages m ON m.id = i.source_message_id "
            "WHERE i.user_id = $1",
            user_id,
        )
        assert linked == "We adopted a greyhound named Biscuit."
        _, again = await export(target, user_id)
        assert comparable(again) == comparable(zf)
        assert (
            await target.fetchval(
                "SELECT api_key_enc FROM embedding_settings WHERE user_id = $1", user_id
            )
            is None
        )
        # the full-text side is recomputed: the imported turn is found by its words
        found = await target.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = $1 "
            "AND fts @@ plainto_tsquery('english', 'greyhound')",
            user_id,
        )
        assert found == 1

        # a second import inserts nothing and leaves every row as it was
        second = await archive.import_user(target, zf, with_settings=True)
        assert second.inserted == 0
        _, after = await export(target, user_id)
        assert comparable(after) == comparable(again)


async def test_import_as_another_user_and_the_refusals(pool, redis, settings, infra, user_id):
    await seed(pool, redis, settings, user_id)
    _, zf = await export(pool, user_id)
    # the same deployment, another user: the ids belong to the first user here
    async with pool.acquire() as conn:
        with pytest.raises(InvalidRequest, match="belong to another user"):
            await archive.import_user(conn, zf, user_id=f"{user_id}-copy")
    async with empty_deployment(infra) as target:
        done = await archive.import_user(target, zf, user_id="renamed")
        assert done.source_user_id == user_id
        assert (
            await target.fetchval("SELECT count(*) FROM memory_items WHERE user_id = 'renamed'")
            == 4
        )
        assert await target.fetchval("SELECT count(*) FROM users WHERE id = $1", user_id) == 0
        # settings are the target's unless asked for
        assert await target.fetchval("SELECT count(*) FROM embedding_settings") == 0
        # an erased id is not brought back by an import
        async with target.transaction():
            await begin_erasure(target, "erased-one")
        with pytest.raises(UserErased):
            await archive.import_user(target, zf, user_id="erased-one")


def rewritten(zf: zipfile.ZipFile, **manifest: Any) -> zipfile.ZipFile:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for name in zf.namelist():
            data = zf.read(name)
            if name == "manifest.json":
                m = json.loads(data)
                m.update(manifest)
                data = json.dumps(m).encode()
            out.writestr(name, data)
    return zipfile.ZipFile(io.BytesIO(buf.getvalue()))


async def test_a_newer_or_foreign_archive_is_refused_clearly(pool, redis, settings, user_id):
    await seed(pool, redis, settings, user_id)
    _, zf = await export(pool, user_id)
    async with pool.acquire() as conn:
        with pytest.raises(InvalidRequest, match="newer than this engram reads"):
            await archive.import_user(conn, rewritten(zf, version=archive.VERSION + 1))
        with pytest.raises(InvalidRequest, match="format"):
            await archive.import_user(conn, rewritten(zf, format="mem0"))
    with pytest.raises(InvalidRequest, match="not a zip"):
        archive.open_archive(b"not a zip")


async def test_every_per_user_table_is_exported_or_left_out_for_a_stated_reason(pool):
    async with pool.acquire() as conn:
        exported = {t.name for t in await archive.describe(conn)}
        for table in await archive.user_tables(conn):
            assert table in exported or table in archive.NOT_EXPORTED, (
                f"{table} has a user_id: export it, or say in NOT_EXPORTED why not"
            )
