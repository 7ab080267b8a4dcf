"""The embedded PostgreSQL keeps planner statistics fresh within seconds of a burst of
writes (engram_cli.stack.PG_CONFIG): with PostgreSQL's default of one autovacuum visit a
minute, a memory search right after 2,000 adds planned its lexical statement for an
empty table (a scan of all the user's rows: 6.3 ms against 0.8 through the index)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from engram_cli.embedded import EmbeddedPostgres
from engram_cli.stack import PG_CONFIG
from shared.db import connect


async def test_a_burst_of_inserts_is_analyzed_within_seconds(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg", delete_on_exit=True, config=dict(PG_CONFIG))
    url = pg.start()
    try:
        conn = await connect(url, codecs=False)
        try:
            assert await conn.fetchval("SHOW autovacuum_naptime") == PG_CONFIG["autovacuum_naptime"]
            await conn.execute("CREATE TABLE burst (id int, body text)")
            await conn.execute(
                "INSERT INTO burst SELECT g, md5(g::text) FROM generate_series(1, 2000) g"
            )
            deadline = time.monotonic() + 20  # four visits; the default would be one a minute
            analyzed = None
            while analyzed is None and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                analyzed = await conn.fetchval(
                    "SELECT last_autoanalyze FROM pg_stat_user_tables WHERE relname = 'burst'"
                )
            assert analyzed is not None
        finally:
            await conn.close()
    finally:
        pg.stop()
