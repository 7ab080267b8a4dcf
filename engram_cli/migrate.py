"""``engram migrate``: apply pending schema migrations."""

from __future__ import annotations

import argparse
import asyncio

from engram_cli.embedded import with_running_stack
from shared.migrate import apply
from shared.settings import CommonSettings


def run(args: argparse.Namespace) -> int:
    settings = with_running_stack(CommonSettings())
    done = asyncio.run(apply(settings.require_database_url(), settings.embedding_dim))
    print(f"applied {len(done)} migration(s)" + (": " + ", ".join(done) if done else ""))
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("migrate", help="apply pending database migrations (safe to run twice)")
    p.set_defaults(func=run)
