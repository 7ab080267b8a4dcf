"""The one writer of memory_items, on real PostgreSQL: types, state, audit, events."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import asyncpg

from shared.events import EmbedRequested, MemoryChanged
from shared.memory.writer import AUDIT_ENTITY, MEMORY_TYPES, NewItem, insert_items

ROOT = Path(__file__).resolve().parent.parent


async def test_memory_type_is_the_migrations_check_constraint(pool: asyncpg.Pool) -> None:
    definition = await pool.fetchval(
        """
        SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
        WHERE c.conrelid = 'memory_items'::regclass AND c.contype = 'c'
          AND pg_get_constraintdef(c.oid) LIKE '%type%'
          AND pg_get_constraintdef(c.oid) NOT LIKE '%embedding_state%'
        """
    )
    allowed = set(re.findall(r"'([a-z_]+)'::text", definition))
    assert allowed == set(MEMORY_TYPES)


async def test_a_new_item_ensures_user_and_theme_is_pending_audited_and_announced(
    pool: asyncpg.Pool, user_id: str
) -> None:
    async with pool.acquire() as conn:
        written = await insert_items(
            conn,
            user_id,
            [NewItem(type="fact", content="likes tea", theme="drinks", source="user")],
            actor="test",
        )
    [item] = written.items
    assert item.inserted and item.embedding_state == "pending"
    assert await pool.fetchval("SELECT count(*) FROM users WHERE id = $1", user_id) == 1
    assert await pool.fetchval(
        "SELECT display_name FROM themes WHERE user_id = $1 AND slug = 'drinks'", user_id
    ) == ("Drinks")
    audit = await pool.fetch(
        "SELECT action, entity, actor FROM audit_log WHERE user_id = $1", user_id
    )
    assert [tuple(a) for a in audit] == [("create", AUDIT_ENTITY, "test")]
    batches = dict(written.events())
    [embed] = batches["embed"]
    assert isinstance(embed, EmbedRequested) and [t.id for t in embed.targets] == [str(item.id)]
    changes = batches["memories"]
    assert [(c.memory_id, c.change) for c in changes if isinstance(c, MemoryChanged)] == [
        (item.id, "added")
    ]


async def test_an_item_with_its_vector_is_ready_and_supersedes_the_older_one(
    pool: asyncpg.Pool, user_id: str
) -> None:
    vec = [1.0] + [0.0] * 383
    by = ("local", "test-model")
    async with pool.acquire() as conn:
        old = await insert_items(
            conn,
            user_id,
            [NewItem(type="fact", content="lives in Lyon", vector=vec, embedded_by=by)],
            actor="test",
        )
        new = await insert_items(
            conn,
            user_id,
            [NewItem(type="fact", content="lives in Paris", vector=vec, embedded_by=by)],
            actor="test",
        )
    [first], [second] = old.items, new.items
    assert first.embedding_state == second.embedding_state == "ready"
    assert second.superseded == (first.id,)
    changes = dict(new.events())["memories"]
    assert {(c.memory_id, c.change) for c in changes if isinstance(c, MemoryChanged)} == {
        (second.id, "added"),
        (second.id, "embedded"),
        (first.id, "superseded"),
    }
    assert "embed" not in dict(new.events())


async def test_a_keyed_item_is_upserted_and_re_embedded_only_when_its_value_changes(
    pool: asyncpg.Pool, user_id: str
) -> None:
    def fact(value: str) -> NewItem:
        return NewItem(type="fact", content=value, category="home", key="city", verified=True)

    async with pool.acquire() as conn:
        a = (await insert_items(conn, user_id, [fact("Lyon")], actor="t")).items[0]
        await conn.execute("UPDATE memory_items SET embedding_state = 'ready' WHERE id = $1", a.id)
        same = await insert_items(conn, user_id, [fact("Lyon")], actor="t")
        changed = await insert_items(conn, user_id, [fact("Paris")], actor="t")
    assert same.items[0].id == a.id and not same.items[0].inserted
    assert same.items[0].embedding_state == "ready" and same.events() == []
    assert changed.items[0].id == a.id and changed.items[0].embedding_state == "pending"
    actions = await pool.fetch(
        "SELECT action FROM audit_log WHERE user_id = $1 AND entity = $2 ORDER BY id",
        user_id,
        AUDIT_ENTITY,
    )
    assert [r["action"] for r in actions] == ["create", "update", "update"]


def test_one_module_writes_memory_items() -> None:
    statement = "INSERT INTO " + "memory_items"  # spelled apart so this file is not a hit
    found = subprocess.run(
        # the product and its benches; ranking tests write fixture rows with exact values
        ["grep", "-rln", statement, "shared", "services", "engram_cli", "engram_client", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    assert found == ["shared/memory/writer.py"]
