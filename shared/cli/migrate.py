"""``engram migrate``: apply pending schema migrations."""

from __future__ import annotations

import argparse
import asyncio

from shared.db import connect
from shared.embedded import with_running_stack
from shared.migrate import migrate
from shared.settings import CommonSettings


async def apply(url: str, embedding_dim: int) -> list[str]:
    conn = await connect(url, codecs=False)
    try:
        return await migrate(conn, embedding_dim=embedding_dim)
    finally:
        await conn.close()


def run(args: argparse.Namespace) -> int:
    settings = with_running_stack(CommonSettings())
    done = asyncio.run(apply(settings.require_database_url(), settings.embedding_dim))
    print(f"applied {len(done)} migration(s)" + (": " + ", ".join(done) if done else ""))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("migrate", help="apply pending database migrations (safe to run twice)")
    p.set_defaults(func=run)
