"""bench/ingest: turns per second end to end (Redis → ingest service → PostgreSQL).

Publishes N turns (default 100,000) over 200 users × 5 chats to the ``turns``
stream while the ingest service runs as its own process, and times until every
one is committed. In the same run, times a plain asyncpg COPY of the same rows
into the same table (with its indexes) as the floor.

    python -m bench.ingest [--turns 100000]
    python -m bench.ingest --cluster [--turns 20000 --shards 12 --rounds 2]
    python -m bench.ingest --traces [--old /path/to/main] [--turns 30000 --rounds 4]

``--cluster``: the same pipeline on one Redis and on a local Redis Cluster (3 masters
with a replica each, each turn XADDed to its chat's shard), alternating, in one run.

``--traces``: the cost of tracing (bench/traces.py): ingest as ``--old``'s checkout runs
it (main: no tracing code), this checkout with tracing off, and this checkout with
tracing on exporting OTLP/HTTP to a local dummy collector, interleaved per round.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
from pydantic import SecretStr

from bench.common import Progress, bench_stack, table, write_result
from engram_cli.cluster import EmbeddedRedisCluster, free_cluster_ports
from shared.events import TurnReceived, encode
from shared.redis_client import connect_redis
from shared.settings import CommonSettings
from shared.stream_registry import TURNS
from shared.streams import EVENT_FIELD

USERS, CHATS = 200, 5
TRACE_ENDPOINT_VARS = ("ENGRAM_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
WORDS = (
    "remember the meeting with sarah about the garden project next tuesday and "
    "bring the blue notebook coffee weather travel plans dinner italian"
).split()


def make_turns(n: int, run: str) -> list[TurnReceived]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        u = i % USERS
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)]
        out.append(
            TurnReceived(
                user_id=f"{run}-u{u}",
                display_name=f"User {u}",
                provider="bench",
                chat_id=f"c{(i // USERS) % CHATS}",
                role="user" if i % 2 == 0 else "assistant",
                content=" ".join(words) + f" #{i}",
                occurred_at=t0 + timedelta(seconds=i),
            )
        )
    return out


async def pipeline_run(
    settings: CommonSettings,
    turns: list[TurnReceived],
    run: str,
    *,
    code: Path | None = None,
    extra_env: dict[str, str] | None = None,
    cpu: list[float] | None = None,
) -> float:
    """Seconds until every turn is committed by an ingest process; ``code``: the
    checkout whose ingest runs (default: this one); ``extra_env``: more of its settings;
    ``cpu``: gets the CPU seconds the ingest process spent meanwhile (its start-up
    excluded), which a loaded machine disturbs far less than the wall time."""
    redis = connect_redis(settings)
    pool = await asyncpg.create_pool(settings.require_database_url(), min_size=1, max_size=2)
    env = {
        # tracing only as extra_env says
        **{k: v for k, v in os.environ.items() if k not in TRACE_ENDPOINT_VARS},
        **({"PYTHONPATH": str(code)} if code is not None else {}),
        "ENGRAM_DATABASE_URL": settings.require_database_url(),
        "ENGRAM_REDIS_URL": settings.require_redis_url(),
        "ENGRAM_REDIS_CLUSTER": str(settings.redis_cluster).lower(),
        "ENGRAM_STREAM_SHARDS": str(settings.stream_shards),
        "ENGRAM_STREAM_PREFIX": settings.stream_prefix,
        "ENGRAM_INGEST_PORT": str(settings.ingest_port),
        "ENGRAM_LOG_LEVEL": "WARNING",
        **(extra_env or {}),
    }
    proc = subprocess.Popen([sys.executable, "-m", "services.ingest"], env=env, cwd=code)
    try:
        import httpx

        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{settings.ingest_port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
        # each turn's shard key and payload made before the clock starts (one key when
        # the stream has one shard)
        keys = TURNS.keys(settings)
        n = settings.stream_shards
        payloads = [(keys[TURNS.shard_of(t, n)], encode(t)) for t in turns]
        progress = Progress("pipeline", len(turns))
        cpu_at_start = _cpu_seconds(proc.pid)
        started = time.perf_counter()

        async def publish() -> None:
            for i in range(0, len(payloads), 2000):
                pipe = redis.pipeline(transaction=False)
                for key, p in payloads[i : i + 2000]:
                    pipe.xadd(key, {EVENT_FIELD: p})
                await pipe.execute()

        publisher = asyncio.create_task(publish())
        while True:
            done = await pool.fetchval(
                "SELECT count(*) FROM messages WHERE user_id LIKE $1", f"{run}-%"
            )
            progress.update(done)
            if done >= len(turns):
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        if cpu is not None:
            cpu.append(_cpu_seconds(proc.pid) - cpu_at_start)
        progress.update(len(turns), force=True)
        await publisher
        return elapsed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        await redis.aclose()
        await pool.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def copy_run(settings: CommonSettings, turns: list[TurnReceived], run: str) -> float:
    """The floor: the same rows COPYed straight into messages (users/episodes made first)."""
    conn = await asyncpg.connect(settings.require_database_url())
    try:
        users = sorted({t.user_id for t in turns})
        await conn.executemany(
            "INSERT INTO users (id) VALUES ($1)", [(f"{u}-copy",) for u in users]
        )
        episodes: dict[tuple[str, str], uuid.UUID] = {}
        for t in turns:
            episodes.setdefault((t.user_id, t.chat_id), uuid.uuid4())
        await conn.executemany(
            """INSERT INTO episodes (id, user_id, provider, chat_id, started_at, last_active_at)
               VALUES ($1, $2, 'bench', $3, now(), now())""",
            [(e, f"{u}-copy", c) for (u, c), e in episodes.items()],
        )
        records = [
            (
                uuid.uuid4(),
                f"{t.user_id}-copy",
                episodes[(t.user_id, t.chat_id)],
                t.provider,
                t.chat_id,
                t.role,
                t.display_name,
                t.content,
                t.occurred_at,
            )
            for t in turns
        ]
        started = time.perf_counter()
        await conn.copy_records_to_table(
            "messages",
            records=records,
            columns=[
                "event_id",
                "user_id",
                "episode_id",
                "provider",
                "chat_id",
                "role",
                "display_name",
                "content",
                "occurred_at",
            ],
        )
        return time.perf_counter() - started
    finally:
        await conn.close()


def cluster_runs(turns_n: int, shards: int, rounds: int) -> None:
    """One Redis against a local Redis Cluster (3 masters + 3 replicas, ``shards``
    shards per stream), the same PostgreSQL and machine, alternating A B A B."""
    with bench_stack("ingest") as single:
        tmp = Path(tempfile.mkdtemp(prefix="engram-bench-cluster-"))
        cluster = EmbeddedRedisCluster(tmp, free_cluster_ports(6))
        try:
            cluster_url = cluster.start()
            on_cluster = single.model_copy(
                update={
                    "redis_url": SecretStr(cluster_url),
                    "redis_cluster": True,
                    "stream_shards": shards,
                    "stream_prefix": f"{single.stream_prefix}c:",
                }
            )
            seconds: dict[str, list[float]] = {"single": [], "cluster": []}
            for r in range(rounds):
                for name, settings in (("single", single), ("cluster", on_cluster)):
                    run = f"b{uuid.uuid4().hex[:6]}"
                    seconds[name].append(
                        asyncio.run(pipeline_run(settings, make_turns(turns_n, run), run))
                    )
                    print(f"round {r + 1} {name}: {turns_n / seconds[name][-1]:,.0f} turns/s")
        finally:
            cluster.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    rate = {k: [turns_n / x for x in v] for k, v in seconds.items()}
    ratios = [c / s for s, c in zip(rate["single"], rate["cluster"], strict=True)]
    result = {
        "turns": turns_n,
        "shards": shards,
        "single_turns_per_s": [round(x) for x in rate["single"]],
        "cluster_turns_per_s": [round(x) for x in rate["cluster"]],
        "ratio_per_round": [round(x, 3) for x in ratios],
        "target_ratio": 0.8,
    }
    path = write_result("ingest_cluster", result)
    print(
        table(
            [
                (f"round {i + 1}", f"{s:,.0f}", f"{c:,.0f}", f"{c / s:.2f}")
                for i, (s, c) in enumerate(zip(rate["single"], rate["cluster"], strict=True))
            ],
            ("", "one Redis turns/s", f"cluster ({shards} shards) turns/s", "cluster / one"),
        )
    )
    print(f"median ratio {statistics.median(ratios):.2f} (target >= 0.8)   -> {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="one Redis against a local Redis Cluster, same run, A B A B (no COPY floor)",
    )
    ap.add_argument("--shards", type=int, default=12, help="shards per stream on the cluster")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--traces",
        action="store_true",
        help="ingest of --old's checkout, tracing off, tracing on (OTLP to a local dummy "
        "collector), interleaved (no COPY floor)",
    )
    ap.add_argument("--old", type=Path, help="with --traces: the checkout to compare against")
    ap.add_argument(
        "--ways", help="with --traces: a comma-separated subset of old,off,on,on 1%% to run"
    )
    args = ap.parse_args()
    if args.traces:
        from bench.traces import traces_runs

        only = [w.strip() for w in args.ways.split(",")] if args.ways else None
        traces_runs(args.turns, args.rounds, old=args.old, only=only)
        return
    if args.cluster:
        cluster_runs(args.turns, args.shards, args.rounds)
        return
    run = f"b{uuid.uuid4().hex[:6]}"
    turns = make_turns(args.turns, run)
    print(f"bench/ingest: {args.turns:,} turns, {USERS} users x {CHATS} chats")
    with bench_stack("ingest") as settings:
        pipeline_s = asyncio.run(pipeline_run(settings, turns, run))
        copy_s = asyncio.run(copy_run(settings, turns, run))
    turns_per_s = args.turns / pipeline_s
    copy_rows_per_s = args.turns / copy_s
    result = {
        "turns": args.turns,
        "pipeline_seconds": round(pipeline_s, 3),
        "copy_seconds": round(copy_s, 3),
        "turns_per_s": round(turns_per_s),
        "copy_rows_per_s": round(copy_rows_per_s),
        "ratio": round(turns_per_s / copy_rows_per_s, 3),
        "target_turns_per_s": 10_000,
    }
    path = write_result("ingest", result)
    print(
        table(
            [
                (
                    "end to end (Redis → ingest → PostgreSQL)",
                    f"{pipeline_s:.2f}",
                    f"{turns_per_s:,.0f}",
                ),
                ("asyncpg COPY floor", f"{copy_s:.2f}", f"{copy_rows_per_s:,.0f}"),
            ],
            ("path", "seconds", "rows/s"),
        )
    )
    print(
        f"ratio (pipeline / COPY): {result['ratio']:.2f}   target ≥ 10,000 turns/s: "
        f"{'met' if turns_per_s >= 10_000 else 'NOT met'}   → {path}"
    )


if __name__ == "__main__":
    main()
