"""bench/archive: how long a heavy user's export and import take (issue 33).

Writes one user with N turns (default 100,000) in 100 chats, N/10 memories and their
audit lines by COPY into a fresh database, then times ``shared.archive``: the export
to a zip on disk, the import into a second, empty database on the same server (what
moving between deployments does, without the re-embedding, which the embedder does
in the background at its own rate: docs/benchmarks.md), and a second import of the
same archive (every row already there). Synthetic text; the sizes are printed.

    python -m bench.archive [--turns 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from bench.common import Progress, bench_stack, table, write_result
from shared import archive
from shared.db import connect
from shared.migrate import migrate

WORDS = (
    "the launch moved to may because the vendor slipped and we agreed to cut the "
    "scope of the dashboard rewrite keep the api stable and ship the export first"
).split()
USER = "heavy"


def text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 5) % len(WORDS)] for k in range(18)) + f" #{i}"


async def seed(url: str, turns: int) -> None:
    conn = await connect(url)
    try:
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        await conn.execute("INSERT INTO users (id, display_name) VALUES ($1, 'Heavy')", USER)
        episodes = [uuid.uuid4() for _ in range(100)]
        await conn.copy_records_to_table(
            "episodes",
            columns=[
                "id",
                "user_id",
                "provider",
                "chat_id",
                "status",
                "started_at",
                "last_active_at",
                "turn_count",
                "summary_text",
            ],
            records=[
                (e, USER, "bench", f"c{k}", "closed", t0, t0, turns // 100, f"chat {k} summary")
                for k, e in enumerate(episodes)
            ],
        )
        bar = Progress("seed turns", turns)
        step = 10_000
        for start in range(0, turns, step):
            await conn.copy_records_to_table(
                "messages",
                columns=[
                    "event_id",
                    "user_id",
                    "episode_id",
                    "provider",
                    "chat_id",
                    "role",
                    "content",
                    "occurred_at",
                ],
                records=[
                    (
                        uuid.uuid4(),
                        USER,
                        episodes[i % 100],
                        "bench",
                        f"c{i % 100}",
                        "user" if i % 2 == 0 else "assistant",
                        text(i),
                        t0 + timedelta(seconds=i),
                    )
                    for i in range(start, min(turns, start + step))
                ],
            )
            bar.update(min(turns, start + step))
        bar.update(turns, force=True)
        await conn.execute(
            "INSERT INTO themes (user_id, slug, display_name) VALUES ($1, 'general', 'General')",
            USER,
        )
        memories = [uuid.uuid4() for _ in range(turns // 10)]
        await conn.copy_records_to_table(
            "memory_items",
            columns=["id", "user_id", "type", "content", "source"],
            records=[(m, USER, "fact", text(i * 3), "bench") for i, m in enumerate(memories)],
        )
        await conn.copy_records_to_table(
            "audit_log",
            columns=["user_id", "actor", "action", "entity", "entity_id"],
            records=[(USER, "bench", "create", "memory", str(m)) for m in memories],
        )
    finally:
        await conn.close()


async def empty_database(url: str) -> str:
    name = f"archive_{uuid.uuid4().hex[:8]}"
    admin = await connect(url, codecs=False)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    target = urlsplit(url)._replace(path=f"/{name}").geturl()
    conn = await connect(target, codecs=False)
    try:
        await migrate(conn, embedding_dim=384)
    finally:
        await conn.close()
    return target


async def run(url: str, turns: int, tmp: Path) -> dict[str, object]:
    await seed(url, turns)
    path = tmp / "heavy.engram.zip"
    conn = await connect(url)
    rows = turns + turns // 10 * 2 + 100 + 2
    bar = Progress("export", rows)
    done = 0

    def exported(_t: str, n: int) -> None:
        nonlocal done
        done += n
        bar.update(done)

    try:
        t = time.perf_counter()
        with path.open("wb") as f:
            manifest = await archive.export_user(conn, USER, f, progress=exported)
        export_s = time.perf_counter() - t
        bar.update(done, force=True)
    finally:
        await conn.close()
    target = await conn_to(await empty_database(url))
    try:
        timings = []
        for label in ("import", "import again"):
            bar = Progress(label, rows)
            done = 0
            t = time.perf_counter()
            with archive.open_archive(path.open("rb")) as zf:
                result = await archive.import_user(target, zf, progress=exported)
            timings.append((time.perf_counter() - t, result.inserted))
            bar.update(done, force=True)
    finally:
        await target.close()
    return {
        "turns": turns,
        "rows": sum(manifest.tables.values()),
        "tables": manifest.tables,
        "archive_bytes": path.stat().st_size,
        "export_s": round(export_s, 2),
        "import_s": round(timings[0][0], 2),
        "import_inserted": timings[0][1],
        "reimport_s": round(timings[1][0], 2),
        "reimport_inserted": timings[1][1],
    }


async def conn_to(url: str):  # noqa: ANN201 - an asyncpg connection
    return await connect(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100_000)
    args = parser.parse_args()
    with bench_stack("archive") as settings:
        out = asyncio.run(run(settings.require_database_url(), args.turns, settings.data_dir))
    rows_s = lambda s: f"{out['rows'] / s:,.0f}"  # noqa: E731
    print(
        table(
            [
                ("export", f"{out['export_s']} s", rows_s(out["export_s"])),
                ("import (empty database)", f"{out['import_s']} s", rows_s(out["import_s"])),
                ("import again (no-op)", f"{out['reimport_s']} s", rows_s(out["reimport_s"])),
            ],
            ("step", "time", "rows/s"),
        )
    )
    print(f"{out['rows']:,} rows, archive {out['archive_bytes'] / 1e6:.1f} MB: {out['tables']}")
    print(f"written to {write_result('archive', out)}")


if __name__ == "__main__":
    main()
