"""What the kill loop prints when a wait times out: the turns not stored or the rows
not embedded, what the ``turns`` / ``embed`` streams and their groups say about them
(entries naming them, pending at which consumer, delivered how often), the dead
letters naming them with their reasons, the kill/restart timeline and the tails of
the ingest and embedder logs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from shared.streams import EVENT_FIELD

UNEMBEDDED = """
SELECT id, user_id, embedding_state, embedding_attempts, embedding_retry_at,
       embedding_error, created_at
FROM messages WHERE user_id = ANY($1) AND embedding_state <> 'ready'
ORDER BY id
"""

NOT_STORED = """
SELECT p.id FROM unnest($1::uuid[]) AS p(id)
WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.event_id = p.id)
"""

Names = Callable[[bytes | None], set[str]]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _json(payload: bytes | None) -> dict[str, Any]:
    try:
        event = json.loads(payload or b"{}")
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def embed_targets(payload: bytes | None) -> set[str]:
    """Message ids an ``EmbedRequested`` payload names."""
    return {
        str(t.get("id"))
        for t in _json(payload).get("targets") or []
        if isinstance(t, dict) and t.get("kind") == "message"
    }


def turn_event(payload: bytes | None) -> set[str]:
    """The event id of a ``TurnReceived`` payload."""
    event_id = _json(payload).get("event_id")
    return {str(event_id)} if event_id else set()


async def _stream(r: aioredis.Redis, stream: str, names: Names, wanted: set[str]) -> list[str]:
    """The stream's groups and consumers, and where each entry naming ``wanted`` is."""
    entries = await r.xrange(stream, "-", "+")
    naming = {_text(i): found for i, f in entries if (found := names(f.get(EVENT_FIELD)) & wanted)}
    out = [f"{stream}: {len(entries)} entries, {len(naming)} name one of them"]
    try:
        groups = await r.xinfo_groups(stream)
    except aioredis.ResponseError as exc:
        return [*out, f"  XINFO GROUPS: {exc}"]
    for g in groups:
        name = _text(g.get("name"))
        out.append(f"  group {name}: " + ", ".join(f"{_text(k)}={_text(v)}" for k, v in g.items()))
        for c in await r.xinfo_consumers(stream, name):
            out.append("    consumer " + ", ".join(f"{_text(k)}={_text(v)}" for k, v in c.items()))
        pending = await r.xpending_range(stream, name, min="-", max="+", count=100_000)
        by_id = {_text(p["message_id"]): p for p in pending}
        for entry_id, found in list(naming.items())[:30]:
            p = by_id.get(entry_id)
            where = (
                f"pending at {_text(p['consumer'])}, delivered {p['times_delivered']}x, "
                f"idle {p['time_since_delivered']} ms"
                if p
                else "not pending (acknowledged, or not yet delivered)"
            )
            out.append(f"    entry {entry_id} names {sorted(found)[:10]}: {where}")
    return out


async def _dead(r: aioredis.Redis, dead: str, names: Names, wanted: set[str]) -> list[str]:
    letters = await r.xrange(dead, "-", "+")
    named = [(i, f) for i, f in letters if names(f.get(b"payload")) & wanted]
    out = [f"{dead}: {len(letters)} entries, {len(named)} name one of them"]
    for i, f in named[:20]:
        out.append(
            f"  {_text(i)} from {_text(f.get(b'stream'))} {_text(f.get(b'entry_id'))} "
            f"after {_text(f.get(b'attempts'))} attempt(s) at {_text(f.get(b'at'))}: "
            f"{_text(f.get(b'error'))[:500]}"
        )
    return out


async def explain(
    stack: Any,
    users: list[str],
    events: list[str],
    *,
    published: Sequence[Any] = (),
    prefix: str = "chaos:",
    tail: int = 60,
) -> str:
    """Why turns of ``published`` are not stored, or rows of ``users`` not embedded
    (best effort: a store that does not answer is said so)."""
    out: list[str] = [""]
    missing: set[str] = set()
    rows: list[asyncpg.Record] = []
    try:
        conn = await asyncpg.connect(stack.database_url)
        try:
            if published:
                ids = [e.event_id for e in published]
                missing = {str(r["id"]) for r in await conn.fetch(NOT_STORED, ids)}
            rows = await conn.fetch(UNEMBEDDED, users)
        finally:
            await conn.close()
    except (OSError, asyncpg.PostgresError) as exc:
        out.append(f"PostgreSQL: {exc!r}")
    out.append(f"=== {len(missing)} published turn(s) not stored: {sorted(missing)[:20]}")
    out.append(f"=== {len(rows)} stored turn(s) not embedded:")
    out += [f"  {dict(r)}" for r in rows[:50]]
    wanted = {str(r["id"]) for r in rows}
    r = aioredis.from_url(stack.redis_url)
    try:
        dead = f"{prefix}dead"
        if missing:
            out += await _stream(r, f"{prefix}turns", turn_event, missing)
            out += await _dead(r, dead, turn_event, missing)
        out += await _stream(r, f"{prefix}embed", embed_targets, wanted)
        out += await _dead(r, dead, embed_targets, wanted)
    except (aioredis.RedisError, OSError) as exc:
        out.append(f"Redis: {exc!r}")
    finally:
        await r.aclose()
    out.append("timeline:")
    out += [f"  {e}" for e in events]
    for inst in stack.instances:
        if inst.service in ("embedder", "ingest"):
            lines = inst.log.read_text(errors="replace").splitlines() if inst.log.exists() else []
            out.append(f"--- {inst.log} (last {tail} of {len(lines)} lines) ---")
            out += lines[-tail:]
    return "\n".join(out)
