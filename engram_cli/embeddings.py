"""``engram embeddings``: rebuild a user's vectors, backfill missing ones, show progress."""

from __future__ import annotations

import argparse
import asyncio

from tqdm import tqdm

from engram_cli.embedded import with_running_stack
from shared.db import create_pool
from shared.embeddings.providers import close_default_registry
from shared.embeddings.rebuild import (
    count_missing,
    embed_missing,
    rebuild_count,
    rebuild_progress,
    start_rebuild,
)
from shared.embeddings.settings import EmbeddingSettings
from shared.redis_client import connect_redis
from shared.streams import Publisher


async def rebuild(
    settings: EmbeddingSettings, user_id: str, *, queue: bool, batch: int, yes: bool
) -> int:
    pool = await create_pool(settings.require_database_url(), max_size=4)
    redis = connect_redis(settings) if queue else None
    try:
        count = await rebuild_count(pool, user_id)
        print(
            f"{user_id}: {count.total} row(s) to rebuild ({count.messages} messages, "
            f"{count.memories} memory items incl. archived, {count.episodes} episode summaries)"
        )
        answer = "y" if yes else await asyncio.to_thread(input, "rebuild them? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing changed")
            return 1
        publisher = Publisher(redis, settings) if redis is not None else None
        status = await start_rebuild(pool, user_id, settings, publisher=publisher)
        print(f"rebuilding with {status.provider} / {status.model}")
        with tqdm(total=status.total, unit="row", desc="rebuild") as bar:
            if queue:
                # The embedder service does the work; watch its progress.
                while status.running:
                    await asyncio.sleep(0.5)
                    found = await rebuild_progress(pool, user_id)
                    assert found is not None
                    status = found
                    bar.update(status.done - bar.n)
            else:
                await embed_missing(
                    pool, settings, user_id=user_id, batch=batch, on_progress=bar.update
                )
        final = await rebuild_progress(pool, user_id)
        assert final is not None
        print(
            f"done: {final.done}/{final.total} rows, {final.errors} in error, "
            f"{final.pending} still pending"
        )
        return 0 if final.pending == 0 else 1
    finally:
        await close_default_registry()
        if redis is not None:
            await redis.aclose()
        await pool.close()


async def backfill(settings: EmbeddingSettings, user_id: str | None, batch: int) -> int:
    pool = await create_pool(settings.require_database_url(), max_size=4)
    try:
        total = await count_missing(pool, user_id=user_id)
        print(f"{total} row(s) without an embedding")
        with tqdm(total=total, unit="row", desc="backfill") as bar:
            result = await embed_missing(
                pool, settings, user_id=user_id, batch=batch, on_progress=bar.update
            )
        print(
            f"ready {result.ready}, error {result.errors}, still pending (provider down) "
            f"{result.deferred}, skipped {result.skipped} (full-text-only users)"
        )
        return 0
    finally:
        await close_default_registry()
        await pool.close()


def run_rebuild(args: argparse.Namespace) -> int:
    settings = with_running_stack(EmbeddingSettings())
    return asyncio.run(
        rebuild(settings, args.user, queue=args.queue, batch=args.batch, yes=args.yes)
    )


def run_backfill(args: argparse.Namespace) -> int:
    settings = with_running_stack(EmbeddingSettings())
    return asyncio.run(backfill(settings, args.user, args.batch))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("embeddings", help="rebuild or backfill embeddings")
    cmds = p.add_subparsers(dest="embeddings_command", required=True)
    r = cmds.add_parser(
        "rebuild", help="re-embed all of a user's rows with the provider now in effect"
    )
    r.add_argument("--user", required=True, help="the user id")
    r.add_argument(
        "--queue",
        action="store_true",
        help="hand the rows to the running embedder service and watch progress "
        "(default: embed them in this process)",
    )
    r.add_argument("--batch", type=int, default=64, help="texts per provider call")
    r.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    r.set_defaults(func=run_rebuild)
    b = cmds.add_parser("backfill", help="embed rows that have no embedding (safe to run twice)")
    b.add_argument("--user", default=None, help="only this user (default: every user)")
    b.add_argument("--batch", type=int, default=64, help="rows per batch")
    b.set_defaults(func=run_backfill)
