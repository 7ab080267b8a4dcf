"""A Redis Cluster on one machine: 3 masters with a replica each, from ``redis-server``.

What ``engram run --cluster`` and the cluster tests start, so an operator can rehearse a
deployment past one Redis and CI can test it. Each node is an :class:`EmbeddedRedis`
with ``cluster-enabled yes`` on its own loopback port and data directory (append-only
file on); the cluster is formed from Python, as ``redis-cli --cluster create`` would:
slots split evenly over the masters (CLUSTER ADDSLOTSRANGE), every node introduced
(CLUSTER MEET), each replica attached to its master (CLUSTER REPLICATE). A second
start on the same directories finds the cluster in each node's ``nodes.conf`` and only
waits for it to be whole.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from engram_cli.embedded import EmbeddedRedis, port_is_free
from shared.errors import InfrastructureError

SLOTS = 16384


def free_cluster_ports(n: int) -> list[int]:
    """``n`` loopback ports each free with its cluster bus port (port + 10000)."""
    rng = random.Random()
    found: list[int] = []
    while len(found) < n:
        port = rng.randrange(20_000, 45_000)
        if port not in found and port_is_free(port) and port_is_free(port + 10_000):
            found.append(port)
    return found


@dataclass
class EmbeddedRedisCluster:
    """``masters`` masters on ``ports[:masters]``, one replica each on the rest."""

    data_dir: Path
    ports: list[int]
    masters: int = 3
    node_timeout_ms: int = 2000
    """how long a master may not answer before its replica takes over (failover)"""
    nodes: list[EmbeddedRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        """One node's URL: a cluster client finds the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self, *, detach: bool = False) -> str:
        if len(self.ports) != 2 * self.masters:
            need = 2 * self.masters
            raise ValueError(f"{self.masters} masters with a replica each need {need} ports")
        extra = (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(self.node_timeout_ms),
            # a replica takes over however long its link was down (a test kills masters
            # on a loaded machine); an operator's cluster keeps Redis's own default
            "--cluster-replica-validity-factor",
            "0",
        )
        self.nodes = [
            EmbeddedRedis(self.data_dir / f"node-{port}", port=port, extra=extra)
            for port in self.ports
        ]
        for node in self.nodes:
            node.start(persistent=True, detach=detach)
        if int(self._client(self.ports[0]).cluster("info").get("cluster_known_nodes", 1)) == 1:
            self._create()
        self.wait_ok()
        return self.url

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def _create(self) -> None:
        masters, replicas = self.ports[: self.masters], self.ports[self.masters :]
        per = SLOTS // self.masters
        for i, port in enumerate(self.ports):
            self._cmd(port, "CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        for i, port in enumerate(masters):
            last = SLOTS - 1 if i == self.masters - 1 else (i + 1) * per - 1
            self._cmd(port, "CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for port in self.ports[1:]:
            self._cmd(self.ports[0], "CLUSTER", "MEET", "127.0.0.1", port)
        self._until(lambda: self._knows_all(), "the nodes to meet")
        for master, replica in zip(masters, replicas, strict=True):
            master_id = self._cmd(master, "CLUSTER", "MYID")
            # the replica must have heard of its master before it can follow it
            self._until(
                functools.partial(self._sees, replica, master_id),
                "the replicas to learn their masters",
            )
            self._cmd(replica, "CLUSTER", "REPLICATE", master_id)

    def _sees(self, port: int, node_id: str) -> bool:
        return node_id in str(self._cmd(port, "CLUSTER", "NODES"))

    def _cmd(self, port: int, *args: str | int) -> Any:
        return self._client(port).execute_command(*args)  # type: ignore[no-untyped-call]

    def _knows_all(self) -> bool:
        return all(
            int(self._client(p).cluster("info").get("cluster_known_nodes", 0)) == len(self.ports)
            for p in self.ports
        )

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Until every live node says ``cluster_state:ok`` and every master has a replica
        in sync (what a failover needs)."""
        self._until(self._whole, "the cluster to be whole", timeout)

    def _whole(self) -> bool:
        live = [n.port for n in self.nodes if n.process is not None and n.process.poll() is None]
        for port in live:
            if self._client(port).cluster("info").get("cluster_state") != "ok":
                return False
        synced = 0
        for port in live:
            info = self._client(port).info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") == "up":
                synced += 1
        return synced >= min(self.masters, len(live) - self.masters)

    def _until(self, ok: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if ok():
                    return
            except (redis.RedisError, OSError) as exc:
                last = exc
            time.sleep(0.1)
        raise InfrastructureError(f"Redis Cluster: timed out waiting for {what} ({last})")

    def master_of(self, key: str) -> EmbeddedRedis:
        """The node that holds ``key``'s slot now."""
        slot = key_slot(key.encode())
        for port in self._live_ports():
            for start, end, master, *_ in self._cmd(port, "CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return next(n for n in self.nodes if n.port == int(master[1]))
        raise InfrastructureError(f"no node serves slot {slot}")

    def replica_of(self, master: EmbeddedRedis) -> EmbeddedRedis:
        """The node replicating ``master`` now."""
        for node in self.nodes:
            if node.port in self._live_ports() and node is not master:
                info = self._client(node.port).info("replication")
                if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                    return node
        raise InfrastructureError(f"no replica follows the master on port {master.port}")

    def cut_replicas(self, master: EmbeddedRedis) -> None:
        """Drop ``master``'s links to its replicas (they reconnect when they can)."""
        self._cmd(master.port, "CLIENT", "KILL", "TYPE", "replica")

    def _live_ports(self) -> list[int]:
        return [n.port for n in self.nodes if n.process is not None and n.process.poll() is None]

    def live_port(self) -> int:
        return self._live_ports()[0]

    def kill(self, node: EmbeddedRedis) -> None:
        """kill -9: no shutdown, no last write to disk or to the replica."""
        if node.process is not None and node.process.poll() is None:
            os.kill(node.process.pid, signal.SIGKILL)
            node.process.wait()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
