"""Faults on a real Redis Cluster (3 masters, a replica each, 6 shards per stream):

- consumers SIGKILLed and restarted while turns of many chats are published: every
  turn stored once and embedded, each chat's turns on one shard in publish order;
- a master killed with kill -9 under load while its replica lags (stopped for a
  second, its link cut), the replica taking over: the turns a producer was told were published but
  that the failover lost, counted without ``WAIT`` (what the replica had not received)
  and with ``ENGRAM_STREAM_WAIT_REPLICAS=1`` (0: nothing unreplicated is
  acknowledged), and the publish latency of both side by side.

The numbers go to the reliability table printed at the end of the run."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from engram_cli.embedded import free_port
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.errors import InfrastructureError
from shared.events import TurnReceived
from shared.redis_client import connect_redis
from shared.stream_registry import TURNS
from shared.streams import EVENT_FIELD, Publisher, stream_state
from tests.chaos.stack import Instance
from tests.conftest import RELIABILITY_PROPERTY
from tests.support import ROOT, running, service_env, wait_for

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _turns(tag: str, start: int, n: int, *, users: int, chats: int) -> list[TurnReceived]:
    return [
        TurnReceived(
            user_id=f"{tag}-u{i % users}",
            provider="cluster",
            chat_id=f"chat-{i % chats}",
            role="user" if i % 2 == 0 else "assistant",
            content=f"turn {i} of the cluster run",
            occurred_at=T0 + timedelta(seconds=i),
        )
        for i in range(start, start + n)
    ]


async def _publish_until_taken(publisher: Publisher, batch: list[TurnReceived]) -> float:
    """Publish ``batch`` until Redis takes it (the same event ids on a retry); return
    the seconds the successful call took."""
    while True:
        started = time.perf_counter()
        try:
            await publisher.publish(TURNS, batch)
            return time.perf_counter() - started
        except InfrastructureError:
            await asyncio.sleep(0.1)


async def _streamed(r: Any, settings: Any) -> dict[str, list[tuple[int, str]]]:
    """Each chat's turns as the shard streams hold them: (shard, event id), in order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for k, key in enumerate(TURNS.keys(settings)):
        for _, fields in await r.xrange(key):
            t = TurnReceived.model_validate_json(fields[EVENT_FIELD])
            out.setdefault(f"{t.user_id}/{t.chat_id}", []).append((k, str(t.event_id)))
    return out


def _order_kept(published: list[TurnReceived], streamed: dict[str, list[tuple[int, str]]]) -> int:
    """Chats whose turns are not all on one shard in publish order (first copies)."""
    want: dict[str, list[str]] = {}
    for t in published:
        want.setdefault(f"{t.user_id}/{t.chat_id}", []).append(str(t.event_id))
    bad = 0
    for chat, ids in want.items():
        got = streamed.get(chat, [])
        first = list(dict.fromkeys(i for _, i in got))
        if len({k for k, _ in got}) != 1 or [i for i in first if i in set(ids)] != ids:
            bad += 1
    return bad


async def _count(pool: asyncpg.Pool, sql: str, *args: Any) -> int:
    return int(await pool.fetchval(sql, *args) or 0)


async def _lost_and_duplicated(
    pool: asyncpg.Pool, published: list[TurnReceived], user_ids: list[str]
) -> tuple[int, int]:
    """Published turns not stored; turns stored more than once."""
    lost = await _count(
        pool,
        "SELECT count(*) FROM unnest($1::uuid[]) AS p(id) "
        "WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.event_id = p.id)",
        [t.event_id for t in published],
    )
    duplicated = await _count(
        pool,
        "SELECT count(*) - count(DISTINCT event_id) FROM messages WHERE user_id = ANY($1)",
        user_ids,
    )
    return lost, duplicated


def _record(request: pytest.FixtureRequest, rows: list[list[str]]) -> None:
    request.node.user_properties.append((RELIABILITY_PROPERTY, rows))


@pytest.fixture(scope="module")
def embed_server() -> Any:
    from tests.embedder.scripted import ScriptedServer

    server = ScriptedServer().start()
    yield server
    server.stop()


async def test_consumers_sigkilled_on_a_cluster_lose_and_repeat_no_turn(
    cluster_settings: Any,
    pool: asyncpg.Pool,
    embed_server: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    settings = cluster_settings(IngestSettings)
    tag = f"ck{uuid.uuid4().hex[:6]}"
    users, chats, total, batch = 6, 48, 1200, 40
    env = service_env(
        settings,
        ENGRAM_EMBEDDING_PROVIDER="openai",
        ENGRAM_EMBEDDING_URL=f"{embed_server.url}/v1",
        ENGRAM_EMBEDDING_MODEL="scripted",
        ENGRAM_EMBED_SWEEP_S="1",
        ENGRAM_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )
    instances = [
        Instance(service, n, free_port(), dict(env), tmp_path / f"{service}-{n}.log")
        for service in ("ingest", "embedder")
        for n in range(2)
    ]
    for inst in instances:
        inst.start()
    r = connect_redis(settings)
    published: list[TurnReceived] = []
    try:
        for inst in instances:
            await asyncio.to_thread(inst.wait_up)
        publisher = Publisher(r, settings)
        done = asyncio.Event()

        async def produce() -> None:
            for start in range(0, total, batch):
                turns = _turns(tag, start, batch, users=users, chats=chats)
                await _publish_until_taken(publisher, turns)
                published.extend(turns)
                await asyncio.sleep(0.15)
            done.set()

        async def kill() -> None:
            rng = random.Random(30)
            while not done.is_set():
                await asyncio.sleep(1.5)
                victim = rng.choice(instances)
                victim.kill()
                victim.start()

        started = time.monotonic()
        await asyncio.gather(produce(), kill())
        load_s = time.monotonic() - started
        user_ids = [f"{tag}-u{u}" for u in range(users)]
        stored = "SELECT count(DISTINCT event_id) FROM messages WHERE user_id = ANY($1)"
        await wait_for(
            lambda: _equals(pool, stored, total, user_ids, instances),
            timeout=120,
            interval=0.25,
            message="every published turn stored",
        )
        ready = (
            "SELECT count(*) FROM messages WHERE user_id = ANY($1) AND embedding_state = 'ready'"
        )
        await wait_for(
            lambda: _equals(pool, ready, total, user_ids, instances),
            timeout=120,
            interval=0.25,
            message="every turn embedded",
        )
        lost, duplicated = await _lost_and_duplicated(pool, published, user_ids)
        turn_count = await _count(
            pool, "SELECT sum(turn_count) FROM episodes WHERE user_id = ANY($1)", user_ids
        )
        out_of_order = _order_kept(published, await _streamed(r, settings))
    finally:
        await r.aclose()
        for inst in instances:
            inst.stop()
    kills = sum(i.kills for i in instances)
    _record(
        request,
        [
            [
                "cluster: turns published",
                str(total),
                f"{users} users, {chats} chats, {load_s:.0f} s",
            ],
            ["cluster: SIGKILLs", str(kills), "ingest, embedder; 2 instances each; 6 shards"],
            ["cluster: lost", str(lost), "published turns not stored"],
            ["cluster: duplicated", str(duplicated), "turns stored twice"],
            ["cluster: chats out of order", str(out_of_order), "not on one shard in order"],
        ],
    )
    assert kills >= 3
    assert lost == 0
    assert duplicated == 0
    assert turn_count == total
    assert out_of_order == 0


async def test_a_master_killed_under_load_loses_only_what_was_not_waited_for(
    cluster_settings: Any,
    redis_cluster: Any,
    pool: asyncpg.Pool,
    request: pytest.FixtureRequest,
) -> None:
    rows: list[list[str]] = []
    outcome: dict[int, dict[str, Any]] = {}
    for wait in (0, 1):
        outcome[wait] = await _kill_a_master(cluster_settings, redis_cluster, pool, wait=wait)
        o = outcome[wait]
        name = "WAIT 1 replica" if wait else "no WAIT"
        rows += [
            [f"master kill, {name}: lost", str(o["lost"]), f"of {o['acked']} acknowledged"],
            [f"master kill, {name}: duplicated", str(o["duplicated"]), "stored twice"],
            [
                f"master kill, {name}: publish p50/p95",
                f"{o['p50']:.2f} / {o['p95']:.2f} ms",
                "a batch of 20 XADDs before the kill",
            ],
            [f"master kill, {name}: failover", f"{o['failover_s']:.1f} s", "kill to new master"],
        ]
    _record(request, rows)
    print(*(" | ".join(row) for row in rows), sep="\n")
    for o in outcome.values():
        assert o["duplicated"] == 0
        assert o["out_of_order"] == 0
    assert outcome[0]["lost"] > 0  # acknowledged, never replicated, gone
    assert outcome[1]["lost"] == 0


async def _kill_a_master(
    cluster_settings: Any, redis_cluster: Any, pool: asyncpg.Pool, *, wait: int
) -> dict[str, Any]:
    """Publish turns over every shard (2 producers) with ingest reading; stop the
    replica of a shard's master (never the node the URL names) for a second, kill -9
    the master, resume the replica; publish on through the failover,
    restart the killed node (it comes back as the new master's replica); then count
    what the producers were told was published and is gone."""
    tag = f"mk{wait}{uuid.uuid4().hex[:6]}"
    settings = cluster_settings(
        IngestSettings,
        stream_wait_replicas=wait,
        stream_wait_timeout_ms=300,
        stream_prefix=f"{tag}:",  # each round its own streams
    )
    users, chats, batch = 4, 40, 20
    victim_key, victim = next(
        (key, node)
        for key in TURNS.keys(settings)
        if (node := redis_cluster.master_of(key)).port != redis_cluster.ports[0]
    )
    r = connect_redis(settings)
    publisher = Publisher(r, settings)
    acked: list[TurnReceived] = []
    latencies: list[float] = []
    killed = asyncio.Event()
    stop = asyncio.Event()

    async def produce(p: int) -> None:
        # each producer has users of its own, so a chat's turns come from one producer
        # and their publish order is the order its calls returned
        start = 0
        while not stop.is_set():
            turns = _turns(f"{tag}-p{p}", start, batch, users=users, chats=chats)
            start += batch
            took = await _publish_until_taken(publisher, turns)
            if not killed.is_set():
                latencies.append(took * 1000)
            acked.extend(turns)

    def failed_over() -> float:
        started = time.monotonic()
        while time.monotonic() - started < 60:
            try:
                if redis_cluster.master_of(victim_key).port != victim.port:
                    break
            except Exception:  # noqa: BLE001 - a node mid-failover may not answer
                pass
            time.sleep(0.05)
        return time.monotonic() - started

    app = ingest_app(settings)
    async with running(app):
        producers = [asyncio.create_task(produce(p)) for p in range(2)]
        await asyncio.sleep(2.0)
        # the replica falls behind (stopped, its link cut for a second: a partition, a
        # busy host) while the producers go on; then the master dies and the replica,
        # resumed, takes over with what it had
        replica = await asyncio.to_thread(redis_cluster.replica_of, victim)
        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)
        # its link is cut too: what the master writes from now on never reaches it
        await asyncio.to_thread(redis_cluster.cut_replicas, victim)
        killed.set()  # publish latency is measured before the lag
        await asyncio.sleep(1.0)
        await asyncio.to_thread(redis_cluster.kill, victim)
        os.kill(replica.process.pid, signal.SIGCONT)
        failover_s = await asyncio.to_thread(failed_over)
        await asyncio.sleep(1.0)  # publishing on the new master
        await asyncio.to_thread(victim.start, persistent=True)
        await asyncio.to_thread(redis_cluster.wait_ok)
        # with WAIT, the shard whose master had no replica took nothing until now
        count_then = len(acked)
        await wait_for(
            lambda: _grew(acked, count_then + 200), timeout=60, message="publishing again"
        )
        stop.set()
        await asyncio.gather(*producers)
        present = await _streamed(r, settings)
        in_streams = {i for entries in present.values() for _, i in entries}
        user_ids = [f"{tag}-p{p}-u{u}" for p in range(2) for u in range(users)]
        try:
            await wait_for(
                lambda: _stored_all(pool, user_ids, in_streams),
                timeout=120,
                interval=0.25,
                message="every entry left in the streams stored",
            )
        except AssertionError:
            for c in app.state.runtime.consumers:
                state = await stream_state(r, c.stream)
                print(c.stream, state)
            stored = {
                str(x["event_id"])
                for x in await pool.fetch(
                    "SELECT event_id FROM messages WHERE user_id = ANY($1)", user_ids
                )
            }
            missing = in_streams - stored
            print(f"wait={wait}: {len(missing)} of {len(in_streams)} in the streams not stored")
            for entry_id, f in await r.xrange(settings.stream("dead")):
                print("dead", entry_id, f.get(b"error", b"")[:200])
            for chat, entries in present.items():
                for k, i in entries:
                    if i in missing:
                        print("missing", chat, k, i)
                        break
            raise
    await r.aclose()
    lost, duplicated = await _lost_and_duplicated(pool, acked, user_ids)
    # order is judged on what the streams kept (a lost entry is counted as lost)
    kept = [t for t in acked if str(t.event_id) in in_streams]
    return {
        "lost": lost,
        "acked": len(acked),
        "duplicated": duplicated,
        "out_of_order": _order_kept(kept, present),
        "p50": statistics.median(latencies),
        "p95": statistics.quantiles(latencies, n=20)[-1],
        "failover_s": failover_s,
    }


async def _grew(acked: list[TurnReceived], n: int) -> bool:
    return len(acked) >= n


async def _stored_all(pool: asyncpg.Pool, user_ids: list[str], ids: set[str]) -> bool:
    stored = {
        str(r["event_id"])
        for r in await pool.fetch("SELECT event_id FROM messages WHERE user_id = ANY($1)", user_ids)
    }
    return ids <= stored


async def _equals(
    pool: asyncpg.Pool, sql: str, want: int, users: list[str], instances: list[Instance]
) -> bool:
    for inst in instances:  # as a supervisor would: one that died at start-up
        if inst.proc is not None and inst.proc.poll() is not None:
            inst.start()
    return await _count(pool, sql, users) == want
