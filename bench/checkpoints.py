"""LangGraph checkpoints: engram over HTTP (EngramSaver) beside LangGraph's own Postgres
checkpointer (AsyncPostgresSaver), on the same embedded PostgreSQL, in one run.

A thread of STEPS checkpoints, each put with its parent (a messages channel that grows
by one ~200-character message a step, as a chat agent's does) and then read back
(get_tuple of the latest), one call at a time. The two savers alternate in rounds
(engram, postgres, engram, postgres ...) so load on the machine falls on both alike.
LangGraph's saver gets a database of its own on the same server: its tables are named
like engram's (checkpoints, checkpoint_writes).

    python -m bench.checkpoints [--steps 400] [--rounds 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from bench.common import bench_stack, percentiles, table, write_result
from bench.search import wait_http
from engram_langgraph import EngramSaver
from shared.apikeys import create_key
from shared.db import create_pool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESSAGE = "The user asked about the weather in Lisbon and the assistant answered it. " * 3
MESSAGE_CHARS = len(MESSAGE)


def checkpoint(step: int, chars: int = MESSAGE_CHARS) -> Checkpoint:
    text = (MESSAGE * (chars // len(MESSAGE) + 1))[:chars]
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=step)),
        ts=datetime.now(UTC).isoformat(),
        channel_values={"messages": [f"{i}: {text}" for i in range(step + 1)], "step": step},
        channel_versions={"messages": step + 1, "step": step + 1},
        versions_seen={"agent": {"messages": step}},
        pending_sends=[],  # type: ignore[typeddict-unknown-key]
        updated_channels=["messages", "step"],
    )


async def run_round(
    saver: BaseCheckpointSaver[Any],
    thread: str,
    steps: range,
    parent: str | None,
    out: dict[str, list[float]],
    chars: int = MESSAGE_CHARS,
) -> str | None:
    for step in steps:
        config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent is not None:
            config["configurable"]["checkpoint_id"] = parent
        cp = checkpoint(step, chars)
        t = time.perf_counter()
        stored = await saver.aput(
            config, cp, {"source": "loop", "step": step, "parents": {}}, {"messages": step + 1}
        )
        out["put"].append(time.perf_counter() - t)
        t = time.perf_counter()
        got = await saver.aget_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        out["get"].append(time.perf_counter() - t)
        assert got is not None and got.checkpoint["id"] == cp["id"], "read back another checkpoint"
        assert len(got.checkpoint["channel_values"]["messages"]) == step + 1
        parent = stored["configurable"]["checkpoint_id"]
    return parent


def start_query(db_url: str, redis_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ENGRAM_DATABASE_URL": db_url,
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_QUERY_PORT": str(port),
        "ENGRAM_LOG_LEVEL": "WARNING",
        "ENGRAM_EMBEDDING_PROVIDER": "none",
    }
    return subprocess.Popen([sys.executable, "-m", "services.query"], env=env, cwd=ROOT)


async def bench(
    db_url: str, redis_url: str, port: int, steps: int, rounds: int, chars: int
) -> dict[str, Any]:
    proc = start_query(db_url, redis_url, port)
    try:
        await wait_http(port, proc)
        pool = await create_pool(db_url, min_size=1, max_size=2)
        _, key = await create_key(pool, user_id="bench-checkpoints")
        await pool.execute("DROP DATABASE IF EXISTS langgraph_bench")
        await pool.execute("CREATE DATABASE langgraph_bench")
        await pool.close()
        lg_url = urlunsplit(urlsplit(db_url)._replace(path="/langgraph_bench"))
        engram = EngramSaver(f"http://127.0.0.1:{port}", key)
        samples: dict[str, dict[str, list[float]]] = {
            name: {"put": [], "get": []} for name in ("engram", "postgres")
        }
        async with AsyncPostgresSaver.from_conn_string(lg_url) as postgres:
            await postgres.setup()
            savers: dict[str, BaseCheckpointSaver[Any]] = {"engram": engram, "postgres": postgres}
            thread = {name: f"bench-{uuid.uuid4().hex[:8]}" for name in savers}
            parent: dict[str, str | None] = {name: None for name in savers}
            # one warm-up round each (connections, prepared statements), not counted
            for name, saver in savers.items():
                await run_round(saver, f"warm-{name}", range(20), None, {"put": [], "get": []})
            per_round = steps // rounds
            for r in range(rounds):
                window = range(r * per_round, (r + 1) * per_round)
                for name, saver in savers.items():
                    parent[name] = await run_round(
                        saver, thread[name], window, parent[name], samples[name], chars
                    )
        await engram.aclose()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    out: dict[str, Any] = {
        name: {op: percentiles(xs) for op, xs in ops.items()} for name, ops in samples.items()
    }
    out["ratio_p95"] = {
        op: round(out["engram"][op]["p95_ms"] / out["postgres"][op]["p95_ms"], 2)
        for op in ("put", "get")
    }
    out["steps"], out["rounds"], out["message_chars"] = steps, rounds, chars
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--chars", type=int, default=MESSAGE_CHARS, help="per message")
    parser.add_argument("--name", default="checkpoints", help="bench/results/NAME.json")
    args = parser.parse_args()
    with bench_stack("ckpt") as s:
        result = asyncio.run(
            bench(
                s.require_database_url(),
                s.require_redis_url(),
                s.query_port,
                args.steps,
                args.rounds,
                args.chars,
            )
        )
    rows: list[tuple[str, ...]] = [
        (name, op, f"{result[name][op]['p50_ms']:.2f}", f"{result[name][op]['p95_ms']:.2f}")
        for op in ("put", "get")
        for name in ("engram", "postgres")
    ]
    print(table(rows, ("saver", "op", "p50 ms", "p95 ms")))
    ratio = result["ratio_p95"]
    print(f"engram / postgres at p95: put {ratio['put']}x, get {ratio['get']}x")
    print(f"-> {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
