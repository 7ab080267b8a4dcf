"""``engram export`` / ``engram import``: a user's whole memory as a portable archive.

The archive's format is in docs/archive.md; the work is done by ``shared/archive.py``.
An import re-embeds the rows with this deployment's model, in this process by default
(a progress bar), or by the running embedder service with ``--queue``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import zipfile
from pathlib import Path

import redis.asyncio as aioredis
from tqdm import tqdm

from engram_cli.embedded import with_running_stack
from shared import archive
from shared.db import create_pool
from shared.embeddings.providers import close_default_registry
from shared.embeddings.rebuild import embed_missing, rebuild_progress, reembed_rows
from shared.embeddings.settings import EmbeddingSettings
from shared.errors import InvalidRequest
from shared.streams import Publisher


async def export(settings: EmbeddingSettings, user_id: str, out: Path) -> int:
    pool = await create_pool(settings.require_database_url(), max_size=2)
    partial = out.with_name(out.name + ".partial")
    try:
        async with pool.acquire() as conn:
            with partial.open("wb") as f, tqdm(unit="row", desc="export") as bar:
                manifest = await archive.export_user(
                    conn, user_id, f, progress=lambda _t, n: bar.update(n)
                )
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
        await pool.close()
    rows = ", ".join(f"{n} {t}" for t, n in manifest.tables.items() if n)
    size = (await asyncio.to_thread(out.stat)).st_size
    print(f"exported {user_id} to {out} ({size:,} bytes): {rows}")
    return 0


def _load(path: Path, source: str, user_id: str | None) -> zipfile.ZipFile:
    if source == "mem0":
        text = path.read_text()
        try:
            data = json.loads(text)
        except ValueError:  # JSON lines: one memory a line
            try:
                data = [json.loads(line) for line in text.splitlines() if line.strip()]
            except ValueError:
                raise InvalidRequest(f"{path}: neither JSON nor JSON lines") from None
        return archive.from_mem0(data, user_id=user_id)
    return archive.open_archive(path.open("rb"))


async def import_(
    settings: EmbeddingSettings,
    path: Path,
    *,
    source: str,
    user_id: str | None,
    with_settings: bool,
    embed: str,
) -> int:
    zf = _load(path, source, user_id)
    pool = await create_pool(settings.require_database_url(), max_size=4)
    redis = aioredis.from_url(settings.require_redis_url()) if embed == "queue" else None
    try:
        rows = sum(int(n) for n in archive.read_manifest(zf)["tables"].values())
        async with pool.acquire() as conn:
            with tqdm(total=rows, unit="row", desc="import") as bar:
                result = await archive.import_user(
                    conn,
                    zf,
                    user_id=user_id if source == "engram" else None,
                    with_settings=with_settings,
                    progress=lambda _t, n: bar.update(n),
                )
        for table, t in result.tables.items():
            print(f"  {table:<20} {t.inserted:>8} imported  {t.skipped:>8} already there")
        for table, cols in result.dropped_columns.items():
            print(f"  {table}: columns this schema does not have, left out: {', '.join(cols)}")
        print(f"imported {result.inserted} row(s) as user {result.user_id}")
        if embed == "none":
            print("rows wait for embeddings: 'engram embeddings backfill --user ...' embeds them")
            return 0
        publisher = Publisher(redis, settings) if redis is not None else None
        status = await reembed_rows(
            pool, result.user_id, settings, result.to_embed, publisher=publisher
        )
        if status is None:
            print("embeddings are off for this user: the rows are searched by their words")
            return 0
        print(f"embedding with {status.provider} / {status.model}")
        with tqdm(total=status.total, initial=status.done, unit="row", desc="embed") as bar:
            if publisher is not None:
                while status.running:
                    await asyncio.sleep(0.5)
                    found = await rebuild_progress(pool, result.user_id)
                    assert found is not None
                    status = found
                    bar.update(status.done - bar.n)
            else:
                await embed_missing(pool, settings, user_id=result.user_id, on_progress=bar.update)
        final = await rebuild_progress(pool, result.user_id)
        assert final is not None
        print(f"embedded: {final.done}/{final.total} rows, {final.errors} in error")
        return 0 if final.pending == 0 else 1
    finally:
        await close_default_registry()
        if redis is not None:
            await redis.aclose()
        await pool.close()


def run_export(args: argparse.Namespace) -> int:
    settings = with_running_stack(EmbeddingSettings())
    out = args.output or Path(f"{args.user}.engram.zip")
    return asyncio.run(export(settings, args.user, out))


def run_import(args: argparse.Namespace) -> int:
    settings = with_running_stack(EmbeddingSettings())
    if not args.file.is_file():
        print(f"engram: {args.file}: no such file", file=sys.stderr)
        return 2
    embed = "none" if args.no_embed else "queue" if args.queue else "here"
    return asyncio.run(
        import_(
            settings,
            args.file,
            source=args.source,
            user_id=args.user,
            with_settings=args.with_settings,
            embed=embed,
        )
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = sub.add_parser("export", help="write a user's whole memory to a portable archive")
    e.add_argument("--user", required=True, help="the user id")
    e.add_argument(
        "-o", "--output", type=Path, default=None, help="the archive (default: USER.engram.zip)"
    )
    e.set_defaults(func=run_export)
    i = sub.add_parser(
        "import", help="import an archive (engram's, or mem0's export) and embed it again"
    )
    i.add_argument("file", type=Path)
    i.add_argument(
        "--from",
        dest="source",
        choices=["engram", "mem0"],
        default="engram",
        help="the archive's kind: engram's (default) or mem0's get_all() JSON / JSON lines",
    )
    i.add_argument(
        "--user",
        default=None,
        help="import as this user id (default: the archive's); for mem0, whose memories",
    )
    i.add_argument(
        "--with-settings",
        action="store_true",
        help="also take the archive's embedding settings (without keys; default: this "
        "deployment's provider)",
    )
    how = i.add_mutually_exclusive_group()
    how.add_argument(
        "--queue",
        action="store_true",
        help="hand the rows to the running embedder service and watch progress",
    )
    how.add_argument("--no-embed", action="store_true", help="store the rows, embed nothing")
    i.set_defaults(func=run_import)
