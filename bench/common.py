"""Shared set-up for benchmarks: servers, settings, timing, result files.

Benchmarks start their own embedded PostgreSQL and Redis in a temporary
directory unless ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL are set.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from engram_cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from shared.migrate import apply
from shared.settings import CommonSettings, default_shared_buffers

RESULTS = Path(__file__).parent / "results"


def bench_postgres(data_dir: Path) -> EmbeddedPostgres:
    """A throwaway embedded PostgreSQL configured like ``make run``'s once it holds what
    the benches load (up to a million items: buffers a quarter of RAM)."""
    buffers = CommonSettings().embedded_pg_shared_buffers or default_shared_buffers()
    return EmbeddedPostgres(data_dir, delete_on_exit=True, config={"shared_buffers": buffers})


def share_model_cache(data_dir: Path) -> None:
    """Point ``data_dir/models`` at the checkout's (``.engram/models``), so the int8
    model is exported once, not in every bench's temporary data directory."""
    shared = Path(__file__).resolve().parent.parent / ".engram" / "models"
    shared.mkdir(parents=True, exist_ok=True)
    (data_dir / "models").symlink_to(shared)


def _run_blocking(work: Coroutine[Any, Any, object]) -> None:
    """Run ``work`` to the end, from sync code or from inside a running event loop
    (then on a thread of its own: ``asyncio.run`` refuses a nested loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(work)
        return
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work).result()


@contextlib.contextmanager
def bench_stack(prefix: str = "bench") -> Iterator[CommonSettings]:
    """Settings pointing at fresh servers (or the configured ones), migrated."""
    base = CommonSettings()
    tmp = Path(tempfile.mkdtemp(prefix=f"engram-{prefix}-"))
    share_model_cache(tmp)
    pg = rd = None
    try:
        db_url = base.database_url.get_secret_value() if base.database_url else None
        redis_url = base.redis_url.get_secret_value() if base.redis_url else None
        if db_url is None:
            pg = bench_postgres(tmp / "pg")
            db_url = pg.start()
        if redis_url is None:
            rd = EmbeddedRedis(tmp / "redis", port=free_port())
            redis_url = rd.start(persistent=False)

        _run_blocking(apply(db_url, embedding_dim=base.embedding_dim))
        yield base.model_copy(
            update={
                "database_url": SecretStr(db_url),
                "redis_url": SecretStr(redis_url),
                "data_dir": tmp,
                "stream_prefix": f"{prefix}{os.getpid()}:",
                "ingest_port": free_port(),
                "embedder_port": free_port(),
                "extractor_port": free_port(),
                "query_port": free_port(),
            }
        )
    finally:
        if rd is not None:
            rd.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def percentiles(samples_s: list[float]) -> dict[str, float]:
    """p50/p95/p99/mean in milliseconds."""
    xs = sorted(samples_s)
    if not xs:
        return {}

    def pct(p: float) -> float:
        return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] * 1000

    return {
        "p50_ms": pct(50),
        "p95_ms": pct(95),
        "p99_ms": pct(99),
        "mean_ms": statistics.fmean(xs) * 1000,
        "n": len(xs),
    }


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({**data, "machine": machine()}, indent=2, default=str) + "\n")
    return path


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


class Progress:
    """A one-line progress report on stderr, at most every ``every`` seconds."""

    def __init__(self, label: str, total: int, every: float = 1.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.started = self.last = time.perf_counter()

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self.last >= self.every:
            self.last = now
            rate = done / max(now - self.started, 1e-9)
            print(
                f"\r  {self.label}: {done:,}/{self.total:,} ({rate:,.0f}/s)",
                end="",
                flush=True,
                file=__import__("sys").stderr,
            )
            if done >= self.total or force:
                print(file=__import__("sys").stderr)


@contextlib.contextmanager
def stack(*, redis: bool = True) -> Iterator[tuple[str, str | None, Path]]:
    """Bare URLs of fresh servers (or the configured ones), not migrated: (db, redis, tmp)."""
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    share_model_cache(tmp)
    pg: EmbeddedPostgres | None = None
    rd: EmbeddedRedis | None = None
    db_url = os.environ.get("ENGRAM_DATABASE_URL")
    redis_url = os.environ.get("ENGRAM_REDIS_URL")
    try:
        if not db_url:
            pg = bench_postgres(tmp / "pg")
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
        shutil.rmtree(tmp, ignore_errors=True)
