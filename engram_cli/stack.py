"""The whole engram stack on one machine: embedded servers, migrations, four services.

``engram run`` (and ``make run``) calls :func:`run_stack`: it starts embedded
PostgreSQL and Redis unless URLs are configured, applies migrations, starts each
service as its own process, prints where everything is, and supervises them: a
service, the embedded Redis or the embedded PostgreSQL that dies is started again
after a backoff (1 s, doubled per death in a row up to 60 s; a run of 60 s resets
it), with a line saying so. On Ctrl-C (or SIGTERM) it stops the services, then the
servers: the PostgreSQL of its data directory whichever process it is now (one
restarted by anyone included).

``engram run --cluster`` starts, on the same machine, a Redis Cluster instead of the one
Redis, a streaming replica of the embedded PostgreSQL (``engram_cli/replica.py``) that
the query instances read, and two processes of every service (the second on its
service's port + 10).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engram_cli.cluster import EmbeddedRedisCluster
from engram_cli.embedded import (
    EmbeddedPostgres,
    EmbeddedRedis,
    database_bytes,
    detached,
    port_is_free,
    stack_file,
    write_stack,
)
from engram_cli.replica import PRIMARY_CONFIG, EmbeddedReplica
from shared.errors import ConfigError, InfrastructureError
from shared.migrate import apply
from shared.settings import CommonSettings, shared_buffers_for

log = logging.getLogger(__name__)

SERVICES = ["ingest", "embedder", "extractor", "query"]
CLUSTER_SHARDS = 12
"""shards per stream on ``engram run --cluster`` (unless ENGRAM_STREAM_SHARDS says more):
twelve hash tags {0}..{11} fall 4/5/3 on three masters of evenly split slots"""
CLUSTER_INSTANCES = 2
"""processes of every service on ``engram run --cluster``"""
INSTANCE_PORT_STEP = 10
"""the second instance of a service listens 10 ports above the first (query 8010)"""
REPLICA_PORT = 5433
"""names the replica's Unix socket (``.s.PGSQL.5433`` in its data directory; no TCP)"""


# Statistics fresh within seconds of a burst of writes: until the first ANALYZE
# after one, the planner takes memory_items for the size it last saw and the
# memory search's lexical statement scans all of a user's rows instead of the
# lexeme index (2,000 LoCoMo memories just added: 6.3 ms against 0.8 ms a
# statement). PostgreSQL's default visits each database once a minute.
PG_CONFIG = {"autovacuum_naptime": "5s"}

BACKOFF_S = 1.0  # first restart of something that died; doubled per death in a row
MAX_BACKOFF_S = 60.0
STABLE_S = 60.0  # running this long resets the backoff


@dataclass
class Restarts:
    """The supervisor's memory of one child: deaths in a row, when to start it again."""

    deaths: int = 0
    started_at: float = field(default_factory=time.monotonic)
    due: float | None = None  # it died: start it again at this monotonic time

    def died(self, what: str, how: str) -> None:
        if time.monotonic() - self.started_at >= STABLE_S:
            self.deaths = 0
        delay = min(BACKOFF_S * 2**self.deaths, MAX_BACKOFF_S)
        self.deaths += 1
        self.due = time.monotonic() + delay
        print(
            f"{what} {how}; restarting it in {delay:.0f} s (death {self.deaths} in a row)",
            file=sys.stderr,
            flush=True,
        )

    def restart_now(self) -> bool:
        return self.due is not None and time.monotonic() >= self.due

    def restarted(self) -> None:
        self.due = None
        self.started_at = time.monotonic()


@dataclass
class Stack:
    settings: CommonSettings
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    cluster: EmbeddedRedisCluster | None = None
    """``engram run --cluster``: a local Redis Cluster instead of the one Redis"""
    with_cluster: bool = False
    replica: EmbeddedReplica | None = None
    """``engram run --cluster``: a streaming replica of the embedded PostgreSQL, which
    the query instances read (ENGRAM_DATABASE_READ_URL)"""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """by instance: ``query``, ``query-2`` ..."""
    database_url: str = ""
    redis_url: str = ""
    quiet: bool = True
    restarts: dict[str, Restarts] = field(default_factory=dict)

    def start_servers(self) -> None:
        """Start what is not configured by URL, apply migrations; one line each."""
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        if s.database_url is None:
            started = time.monotonic()
            pgdata = s.data_dir / "postgres"
            buffers = s.embedded_pg_shared_buffers or shared_buffers_for(database_bytes(pgdata))
            config = {"shared_buffers": buffers, **PG_CONFIG}
            if self.with_cluster:
                config.update(PRIMARY_CONFIG)
            self.postgres = EmbeddedPostgres(pgdata, config=config)
            self.database_url = self.postgres.start()
            line(
                "PostgreSQL",
                f"embedded, ready in {time.monotonic() - started:.1f} s "
                f"({pgdata}, shared_buffers {buffers})",
            )
            if self.with_cluster:
                started = time.monotonic()
                self.replica = EmbeddedReplica.of(
                    self.postgres, s.data_dir / "postgres-replica", REPLICA_PORT
                )
                self.replica.start()
                line(
                    "replica",
                    f"streaming, ready in {time.monotonic() - started:.1f} s "
                    f"({self.replica.data_dir}); the query instances read it",
                )
        else:
            self.database_url = s.database_url.get_secret_value()
            line("PostgreSQL", "ENGRAM_DATABASE_URL")
        if s.redis_url is None and self.with_cluster:
            ports = [s.embedded_redis_port + i for i in range(6)]
            taken = [p for p in ports if not port_is_free(p) or not port_is_free(p + 10_000)]
            if taken:
                raise ConfigError(
                    f"ports {taken} (or their cluster bus ports, +10000) for the local Redis "
                    "Cluster are taken; stop what holds them or set ENGRAM_EMBEDDED_REDIS_PORT"
                )
            self.cluster = EmbeddedRedisCluster(s.data_dir / "redis-cluster", ports)
            self.redis_url = self.cluster.start(detach=True)
            self.settings = s = s.model_copy(
                update={
                    "redis_cluster": True,
                    "stream_shards": max(s.stream_shards, CLUSTER_SHARDS),
                }
            )
            line(
                "Redis",
                f"local cluster, 3 masters + 3 replicas on ports {ports[0]}-{ports[-1]}, "
                f"{s.stream_shards} shards per stream ({s.data_dir / 'redis-cluster'})",
            )
        elif s.redis_url is None:
            port = s.embedded_redis_port
            if not port_is_free(port):
                raise ConfigError(
                    f"port {port} for the embedded Redis is taken (another 'engram run'?); "
                    "stop it or set ENGRAM_EMBEDDED_REDIS_PORT"
                )
            self.redis = EmbeddedRedis(s.data_dir / "redis", port=port)
            self.redis_url = self.redis.start(detach=True)
            line("Redis", f"embedded, {self.redis_url} ({s.data_dir / 'redis'})")
        else:
            self.redis_url = s.redis_url.get_secret_value()
            line("Redis", "ENGRAM_REDIS_URL")
        done = asyncio.run(apply(self.database_url, s.embedding_dim))
        line("migrations", f"{len(done)} applied" if done else "up to date")
        write_stack(
            s,
            database_url=self.database_url,
            redis_url=self.redis_url,
            redis_cluster=s.redis_cluster,
            stream_shards=s.stream_shards,
        )

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.quiet:
            env.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
            env.setdefault("TQDM_DISABLE", "1")  # the model's loading bar
        env["ENGRAM_DATABASE_URL"] = self.database_url
        env["ENGRAM_REDIS_URL"] = self.redis_url
        env["ENGRAM_REDIS_CLUSTER"] = "true" if self.settings.redis_cluster else "false"
        env["ENGRAM_STREAM_SHARDS"] = str(self.settings.stream_shards)
        env["ENGRAM_DATA_DIR"] = str(self.settings.data_dir.resolve())
        if self.replica is not None:
            env["ENGRAM_DATABASE_READ_URL"] = self.replica.url
        return env

    @property
    def instances(self) -> int:
        return CLUSTER_INSTANCES if self.with_cluster else 1

    def start_services(self, names: list[str]) -> None:
        for name in names:
            for i in range(self.instances):
                self.start_instance(instance_name(name, i))

    def start_instance(self, key: str) -> None:
        """Start one process of a service (``query`` or ``query-2``, on its own port)."""
        root = Path(__file__).resolve().parent.parent
        env = self.env()
        service, _, _ = key.partition("-")
        env[f"ENGRAM_{service.upper()}_PORT"] = str(self.port(key))
        self.processes[key] = subprocess.Popen(
            [sys.executable, "-m", f"services.{service}"],
            env=env,
            cwd=root,
            preexec_fn=detached,
        )

    def supervise(self) -> None:
        """One look at every child: note what died, start again what is due."""

        def gone(code: int | None) -> str | None:
            return None if code is None else f"exited with code {code}"

        # (what, how it ended or None while it runs, how to start it again)
        watched: list[tuple[str, str | None, Callable[[], object]]] = [
            (f"service {name}", gone(proc.poll()), functools.partial(self.start_instance, name))
            for name, proc in self.processes.items()
        ]
        if self.redis is not None and self.redis.process is not None:
            redis, proc = self.redis, self.redis.process
            watched.append(
                ("Redis", gone(proc.poll()), functools.partial(redis.start, detach=True))
            )
        if self.postgres is not None:
            ended = None if self.postgres.running() else "is gone"
            watched.append(("PostgreSQL", ended, self.postgres.revive))
        if self.replica is not None:
            ended = None if self.replica.running() else "is gone"
            watched.append(("PostgreSQL replica", ended, self.replica.start))
        for what, ended, start in watched:
            state = self.restarts.setdefault(what, Restarts())
            if ended is None and state.due is None:
                continue
            if ended is None:  # it came back by itself (PostgreSQL restarted by hand)
                state.restarted()
            elif state.due is None:
                state.died(what, ended)
            elif state.restart_now():
                try:
                    start()
                except (
                    InfrastructureError,
                    ConfigError,
                    OSError,
                    subprocess.SubprocessError,
                ) as exc:
                    state.died(what, f"did not start again ({exc})")
                    continue
                state.restarted()
                print(f"{what} started again", file=sys.stderr, flush=True)

    def port(self, key: str) -> int:
        """The port of an instance (``query``: ENGRAM_QUERY_PORT; ``query-2``: 10 above)."""
        service, _, n = key.partition("-")
        base = int(getattr(self.settings, f"{service}_port"))
        return base + (int(n) - 1) * INSTANCE_PORT_STEP if n else base

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Wait for every service's /health; print a line as each one answers."""
        started = time.monotonic()
        deadline = started + timeout
        waiting = list(self.processes)
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                proc = self.processes[name]
                if proc.poll() is not None:
                    raise InfrastructureError(f"service {name} exited with code {proc.returncode}")
                try:
                    url = f"http://{self.settings.host}:{self.port(name)}/health"
                    if httpx.get(url, timeout=1.0).status_code == 200:
                        waiting.remove(name)
                        line(name, f"ready in {time.monotonic() - started:.1f} s")
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
        if self.cluster is not None:
            self.cluster.stop()
        if self.replica is not None:
            self.replica.stop()
        if self.postgres is not None:
            self.postgres.stop()
        stack_file(self.settings).unlink(missing_ok=True)


def instance_name(service: str, i: int) -> str:
    """``query`` for the first process of a service, ``query-2`` for the second ..."""
    return service if i == 0 else f"{service}-{i + 1}"


def line(what: str, text: str) -> None:
    print(f"  {what:<11}{text}", flush=True)


def run_stack(
    settings: CommonSettings,
    services: list[str] | None = None,
    *,
    quiet: bool = True,
    cluster: bool = False,
) -> int:
    stack = Stack(settings, quiet=quiet, with_cluster=cluster)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print("starting engram ...", flush=True)
    try:
        stack.start_servers()
        names = services or SERVICES
        stack.start_services(names)
        stack.wait_healthy()
        settings = stack.settings
        base = f"http://{settings.host}:{settings.query_port}"
        print("\nengram is running (Ctrl-C stops it)")
        print(f"  API        {base}/v1/  (index of the API: {base}/)")
        print(f"  API docs   {base}/docs")
        print(f"  browser    {base}/ui/")
        for name in stack.processes:
            print(f"  {name:<11}http://{settings.host}:{stack.port(name)}/metrics  /health")
        if stack.instances > 1:
            print(f"  API (2)    http://{settings.host}:{stack.port('query-2')}/v1/")
        print(f"  PostgreSQL {stack.database_url}")
        if stack.replica is not None:
            print(f"  replica    {stack.replica.url}  (ENGRAM_DATABASE_READ_URL of the query)")
        where = (
            "engram publish picks the shard"
            if stack.cluster
            else "platforms XADD to engram:turns here"
        )
        print(f"  Redis      {stack.redis_url}  ({where})")
        print("  publish    .venv/bin/engram publish FILE.jsonl   (or: make publish FILE=...)\n")
        sys.stdout.flush()
        while not stopping:
            stack.supervise()
            time.sleep(0.3)
        return 0
    finally:
        print("\nstopping engram: services, then Redis and PostgreSQL ...", flush=True)
        stack.stop()
        print("stopped.", flush=True)
