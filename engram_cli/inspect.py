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


async def show_dead(settings: CommonSettings, count: int, replay: bool) -> None:
    redis = connect_redis(settings)
    key = DEAD.key(settings)
    try:
        entries: list[Any] = list(await redis.xrevrange(key, count=count) or [])
        for entry_id, fields in reversed(entries):
            f = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
            print(json.dumps({"id": entry_id.decode(), **f}))
            if replay and f.get("stream") and f.get("payload"):
                await redis.xadd(f["stream"], {EVENT_FIELD: f["payload"].encode()})
                await redis.xdel(key, entry_id)
        print(
            f"{len(entries)} dead-lettered entr{'y' if len(entries) == 1 else 'ies'}"
            + (" replayed" if replay else "")
        )
    finally:
        await redis.aclose()


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
        help="put each listed entry back on its stream and remove it from dead",
    )
    d.set_defaults(
        func=lambda a: asyncio.run(
            show_dead(with_running_stack(CommonSettings()), a.count, a.replay)
        )
    )
