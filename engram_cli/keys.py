"""``engram keys``: create, list and revoke API keys."""

from __future__ import annotations

import argparse
import asyncio

from engram_cli.embedded import with_running_stack
from shared.apikeys import create_key, list_keys, revoke_key
from shared.db import connect
from shared.errors import ConfigError
from shared.settings import CommonSettings


async def _create(args: argparse.Namespace) -> int:
    if not args.admin and not args.user:
        raise ConfigError("give --user USER_ID, or --admin for an admin key")
    settings = with_running_stack(CommonSettings())
    conn = await connect(settings.require_database_url())
    try:
        key, secret = await create_key(conn, user_id=args.user, is_admin=args.admin, name=args.name)
    finally:
        await conn.close()
    who = "admin" if key.is_admin else f"user {key.user_id}"
    print(f"created {who} key {key.prefix} (shown once, keep it):")
    print(secret)
    return 0


async def _revoke(args: argparse.Namespace) -> int:
    settings = with_running_stack(CommonSettings())
    conn = await connect(settings.require_database_url())
    try:
        key = await revoke_key(conn, args.prefix)
    finally:
        await conn.close()
    print(f"revoked key {key.prefix}")
    return 0


async def _list(args: argparse.Namespace) -> int:
    settings = with_running_stack(CommonSettings())
    conn = await connect(settings.require_database_url())
    try:
        rows = await list_keys(conn)
    finally:
        await conn.close()
    for r in rows:
        state = f"revoked {r['revoked_at']:%Y-%m-%d}" if r["revoked_at"] else "live"
        who = "ADMIN" if r["is_admin"] else r["user_id"]
        print(f"{r['prefix']}  {who:<24} {state:<18} {r['name'] or ''}")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="create, list and revoke API keys")
    ks = p.add_subparsers(dest="keys_command", required=True)
    c = ks.add_parser("create", help="create a key for a user (or an admin key)")
    c.add_argument("--user", help="the user id the key acts for")
    c.add_argument("--admin", action="store_true", help="an admin key (any user, global search)")
    c.add_argument("--name", help="a label")
    c.set_defaults(func=lambda a: asyncio.run(_create(a)))
    r = ks.add_parser(
        "revoke",
        help="revoke a key by its prefix (a prefix two live keys share revokes none "
        "and names them: then give the whole key)",
    )
    r.add_argument("prefix", help="the 8 hex characters after eg_, or the whole key")
    r.set_defaults(func=lambda a: asyncio.run(_revoke(a)))
    ls = ks.add_parser("list", help="list keys (prefixes only)")
    ls.set_defaults(func=lambda a: asyncio.run(_list(a)))
