"""Bench helpers: a PostgreSQL + Redis to measure against (embedded in a temp dir, or the
ones ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL name)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from shared.embedded import EmbeddedPostgres, EmbeddedRedis, free_port


@contextlib.contextmanager
def stack(*, redis: bool = True) -> Iterator[tuple[str, str | None, Path]]:
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    pg: EmbeddedPostgres | None = None
    rd: EmbeddedRedis | None = None
    db_url = os.environ.get("ENGRAM_DATABASE_URL")
    redis_url = os.environ.get("ENGRAM_REDIS_URL")
    try:
        if not db_url:
            pg = EmbeddedPostgres(tmp / "pg", delete_on_exit=True)
            db_url = pg.start()
        if redis and not redis_url:
            rd = EmbeddedRedis(tmp / "redis", port=free_port())
            redis_url = rd.start(persistent=False)
        yield db_url, redis_url, tmp
    finally:
        if rd is not None:
            rd.stop()
        if pg is not None:
            pg.stop()
