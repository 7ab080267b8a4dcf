"""The whole engram stack on one machine: embedded servers, migrations, four services.

``engram run`` (and ``make run``) calls :func:`run_stack`: it starts embedded
PostgreSQL and Redis unless URLs are configured, applies migrations, starts each
service as its own process, prints where everything is, and on Ctrl-C (or
SIGTERM) stops the services, then the servers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engram_cli.embedded import EmbeddedPostgres, EmbeddedRedis, free_port, stack_file, write_stack
from shared.errors import InfrastructureError
from shared.migrate import apply
from shared.settings import CommonSettings

log = logging.getLogger(__name__)

SERVICES = ["ingest", "embedder", "extractor", "query"]


@dataclass
class Stack:
    settings: CommonSettings
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    database_url: str = ""
    redis_url: str = ""

    def start_servers(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        if s.database_url is None:
            print(f"starting embedded PostgreSQL in {s.data_dir / 'postgres'} ...", flush=True)
            self.postgres = EmbeddedPostgres(
                s.data_dir / "postgres", config={"shared_buffers": s.embedded_pg_shared_buffers}
            )
            self.database_url = self.postgres.start()
        else:
            self.database_url = s.database_url.get_secret_value()
        if s.redis_url is None:
            self.redis = EmbeddedRedis(s.data_dir / "redis", port=free_port())
            print(f"starting embedded Redis in {s.data_dir / 'redis'} ...", flush=True)
            self.redis_url = self.redis.start()
        else:
            self.redis_url = s.redis_url.get_secret_value()
        done = asyncio.run(apply(self.database_url, s.embedding_dim))
        print(f"migrations: {len(done)} applied" + (f" ({', '.join(done)})" if done else ""))
        write_stack(s, database_url=self.database_url, redis_url=self.redis_url)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["ENGRAM_DATABASE_URL"] = self.database_url
        env["ENGRAM_REDIS_URL"] = self.redis_url
        env["ENGRAM_DATA_DIR"] = str(self.settings.data_dir.resolve())
        return env

    def start_services(self, names: list[str]) -> None:
        root = Path(__file__).resolve().parent.parent
        for name in names:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", f"services.{name}"], env=self.env(), cwd=root
            )

    def port(self, name: str) -> int:
        return int(getattr(self.settings, f"{name}_port"))

    def wait_healthy(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        waiting = set(self.processes)
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                proc = self.processes[name]
                if proc.poll() is not None:
                    raise InfrastructureError(f"service {name} exited with code {proc.returncode}")
                try:
                    url = f"http://{self.settings.host}:{self.port(name)}/health"
                    if httpx.get(url, timeout=1.0).status_code == 200:
                        waiting.discard(name)
                except httpx.HTTPError:
                    pass
            time.sleep(0.2)
        if waiting:
            raise InfrastructureError(f"services not healthy after {timeout:.0f} s: {waiting}")

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.processes.items():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                log.warning("service %s did not stop in 15 s; killing it", name)
                proc.kill()
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
        stack_file(self.settings).unlink(missing_ok=True)


def run_stack(settings: CommonSettings, services: list[str] | None = None) -> int:
    stack = Stack(settings)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        stack.start_servers()
        names = services or SERVICES
        stack.start_services(names)
        stack.wait_healthy()
        h = settings.host
        print("\nengram is running (Ctrl-C stops it)")
        print(f"  API        http://{h}:{settings.query_port}/v1")
        print(f"  API docs   http://{h}:{settings.query_port}/docs")
        print(f"  browser    http://{h}:{settings.query_port}/ui")
        for name in names:
            print(f"  {name:<10} http://{h}:{stack.port(name)}/metrics  /health")
        print(f"  PostgreSQL {stack.database_url}")
        print(f"  Redis      {stack.redis_url}")
        print("  publish    engram publish FILE.jsonl   (or: make publish FILE=...)\n", flush=True)
        while not stopping:
            for name, proc in stack.processes.items():
                if proc.poll() is not None:
                    print(
                        f"service {name} exited with code {proc.returncode}; stopping",
                        file=sys.stderr,
                    )
                    stopping = True
            time.sleep(0.3)
        return 0
    finally:
        print("\nstopping engram ...", flush=True)
        stack.stop()
        print("stopped.", flush=True)
