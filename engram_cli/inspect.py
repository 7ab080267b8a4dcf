"""``engram messages`` and ``engram dead``: look at what is stored and what failed."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from engram_cli.embedded import with_running_stack
from shared.db import connect
from shared.redis_client import connect_redis
from shared.settings import CommonSettings
from shared.stream_registry import DEAD
from shared.streams import EVENT_FIELD


async def show_messages(settings: CommonSettings, user_id: str, limit: int) -> None:
    conn = await connect(settings.require_database_url())
    try:
        rows = await conn.fetch(
            """
            SELECT m.occurred_at, m.role, coalesce(m.display_name, m.role) AS who, m.content,
                   m.episode_id, e.status, m.embedding_state
            FROM messages m JOIN episodes e ON e.id = m.episode_id
            WHERE m.user_id = $1
            ORDER BY m.occurred_at, m.id
            LIMIT $2
            """,
            user_id,
            limit,
        )
    finally:
        await conn.close()
    episode = None
    for r in rows:
        if r["episode_id"] != episode:
            episode = r["episode_id"]
            print(f"-- episode {episode} ({r['status']})")
        print(
            f"{r['occurred_at']:%Y-%m-%d %H:%M:%S} {r['who']:>12}: {r['content']}"
            f"   [{r['embedding_state']}]"
        )
    print(f"{len(rows)} message(s)")


PREVIEW_CHARS = 300
"""How much of a dead-lettered payload ``engram dead`` prints, unless ``--full``."""


def _preview(payload: str, full: bool) -> tuple[str, str | None]:
    if full or len(payload) <= PREVIEW_CHARS:
        return payload, None
    return payload[:PREVIEW_CHARS], f"payload cut at {PREVIEW_CHARS} of {len(payload):,} characters"


async def show_dead(
    settings: CommonSettings, count: int, replay: bool, *, full: bool = False
) -> None:
    """Print the newest ``count`` dead letters, oldest first, one JSON line each with
    the payload cut to :data:`PREVIEW_CHARS` (``note`` says so; ``full`` prints it
    whole). ``replay`` puts each entry that was read from a stream back on it and
    removes it from ``dead``; an entry that cannot be replayed (a line ``engram
    publish`` skipped, never on a stream; a payload not kept) stays, and says why."""
    redis = connect_redis(settings)
    key = DEAD.key(settings)
    replayed, kept = 0, 0
    try:
        entries: list[Any] = list(await redis.xrevrange(key, count=count) or [])
        for entry_id, fields in reversed(entries):
            f = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
            payload = f.get("payload", "")
            shown, note = _preview(payload, full)
            line: dict[str, Any] = {"id": entry_id.decode(), **f, "payload": shown}
            if note:
                line["note"] = note
            if replay:
                why_not = _cannot_replay(f)
                if why_not is None:
                    await redis.xadd(f["stream"], {EVENT_FIELD: payload.encode()})
                    await redis.xdel(key, entry_id)
                    replayed += 1
                else:
                    line["replay"] = f"not replayed: {why_not}"
                    kept += 1
            print(json.dumps(line))
        summary = f"{len(entries)} dead-lettered entr{'y' if len(entries) == 1 else 'ies'}"
        if replay:
            summary += f"; {replayed} replayed"
            if kept:
                summary += f", {kept} not replayable (left in dead, see 'replay' above)"
        print(summary)
    finally:
        await redis.aclose()


def _cannot_replay(entry: dict[str, str]) -> str | None:
    if not entry.get("stream"):
        return (
            "a line engram publish skipped; it was never on a stream. Fix the line and "
            "publish it again"
        )
    if not entry.get("payload"):
        return "its payload was not kept (its user was erased)"
    if "(cut at " in entry.get("error", ""):
        return "its payload was cut when it was dead-lettered"
    return None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("messages", help="print a user's stored conversation in order")
    p.add_argument("user_id")
    p.add_argument("--limit", type=int, default=200)
    p.set_defaults(
        func=lambda a: asyncio.run(
            show_messages(with_running_stack(CommonSettings()), a.user_id, a.limit)
        )
    )

    d = sub.add_parser("dead", help="list dead-lettered entries (optionally replay them)")
    d.add_argument("--count", type=int, default=50)
    d.add_argument(
        "--replay",
        action="store_true",
        help="put each listed entry back on its stream and remove it from dead "
        "(an entry that cannot be replayed stays, and says why)",
    )
    d.add_argument(
        "--full",
        action="store_true",
        help=f"print each payload whole (default: the first {PREVIEW_CHARS} characters)",
    )
    d.set_defaults(
        func=lambda a: asyncio.run(
            show_dead(with_running_stack(CommonSettings()), a.count, a.replay, full=a.full)
        )
    )
