"""``engram users reenable ID``: let an erased user's id store data again."""

from __future__ import annotations

import argparse
import asyncio

from engram_cli.embedded import with_running_stack
from shared.db import connect
from shared.erasure import reenable_user
from shared.settings import CommonSettings


async def reenable(settings: CommonSettings, user_id: str) -> int:
    """Lift the tombstone (audited, as ``POST /v1/users/{id}/reenable`` does)."""
    conn = await connect(settings.require_database_url())
    try:
        async with conn.transaction():
            await reenable_user(conn, user_id=user_id, actor="admin")
    finally:
        await conn.close()
    print(f"re-enabled user {user_id}: their new events are stored again")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("users", help="manage users (re-enable an erased user)")
    us = p.add_subparsers(dest="users_command", required=True)
    r = us.add_parser(
        "reenable",
        help="let an erased user's id be used again (erasure drops their events until then)",
    )
    r.add_argument("user_id")
    r.set_defaults(
        func=lambda a: asyncio.run(reenable(with_running_stack(CommonSettings()), a.user_id))
    )
