"""bench/poison: ingest throughput with poison entries beside a clean run (issue 17.5).

10,000 turns (200 users x 5 chats), alone ("clean") or with 10 poison entries
mixed in ("poison": a NUL byte in display_name, metadata, chat_id or tool_args,
NaN in metadata, the years 0001 and 9999; what PostgreSQL refuses). Timed from the
first XADD until every entry is resolved: stored, or in the dead-letter stream
(the old code dead-lettered some good turns beside the poison: they are counted).
The ingest service runs as its own process; with ``--old PATH`` (a checkout of the code before this
change) its ingest runs the same cases in the same run, alternated, so the ratios
are side by side.

    python -m bench.poison [--turns 10000] [--rounds 3] [--old /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis

from bench.common import bench_stack, table, write_result
from bench.ingest import make_turns
from shared.events import encode
from shared.settings import CommonSettings
from shared.streams import EVENT_FIELD

ROOT = Path(__file__).resolve().parent.parent


def poison(run: str) -> list[bytes]:
    """Ten entries that pass the old validation but that PostgreSQL refuses."""
    base = {
        "provider": "bench",
        "chat_id": "c0",
        "role": "user",
        "content": "poison",
        "occurred_at": "2026-01-01T00:00:00Z",
    }
    cases: list[dict[str, Any]] = [
        {"display_name": "nul\u0000name"},
        {"metadata": {"k": "nul\u0000value"}},
        {"chat_id": "nul\u0000chat"},
        {"tool_name": "t", "tool_args": {"a": "nul\u0000arg"}},
        {"occurred_at": "0001-01-01T00:00:00Z"},
        {"occurred_at": "9999-12-31T23:59:59Z"},
        {"metadata": {"k": "x", "n\u0000": 1}},
        {"display_name": "again\u0000"},
        {"tool_name": "t", "tool_args": ["\u0000"]},
        {"occurred_at": "0001-01-01T00:00:00+05:00"},
    ]
    out = []
    for i, case in enumerate(cases):
        event = {
            **base,
            **case,
            "user_id": f"{run}-u{i}",
            "event_id": str(uuid.uuid4()),
            "schema": "turn.v1",
        }
        out.append(json.dumps(event).encode())
    return out


async def one_run(
    settings: CommonSettings, code: Path, *, n: int, with_poison: bool, label: str
) -> tuple[float, int]:
    """Seconds until every entry is stored or dead-lettered; good turns lost."""
    run = f"p{uuid.uuid4().hex[:6]}"
    prefix = f"{label}-{run}:"
    redis = aioredis.from_url(settings.require_redis_url())
    pool = await asyncpg.create_pool(settings.require_database_url(), min_size=1, max_size=2)
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "ENGRAM_DATABASE_URL": settings.require_database_url(),
        "ENGRAM_REDIS_URL": settings.require_redis_url(),
        "ENGRAM_STREAM_PREFIX": prefix,
        "ENGRAM_INGEST_PORT": str(settings.ingest_port),
        "ENGRAM_LOG_LEVEL": "ERROR",
    }
    proc = subprocess.Popen([sys.executable, "-m", "services.ingest"], env=env, cwd=code)
    try:
        for _ in range(600):
            try:
                url = f"http://127.0.0.1:{settings.ingest_port}/health"
                if httpx.get(url).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
        payloads = [encode(t) for t in make_turns(n, run)]
        bad = poison(run) if with_poison else []
        # spread the poison through the stream
        step = max(1, len(payloads) // (len(bad) + 1))
        for k, p in enumerate(bad):
            payloads.insert((k + 1) * step + k, p)
        key = f"{prefix}turns"
        started = time.perf_counter()
        for i in range(0, len(payloads), 2000):
            pipe = redis.pipeline(transaction=False)
            for p in payloads[i : i + 2000]:
                pipe.xadd(key, {EVENT_FIELD: p})
            await pipe.execute()
        while True:
            stored = await pool.fetchval(
                "SELECT count(*) FROM messages WHERE user_id LIKE $1", f"{run}-%"
            )
            dead = await redis.xlen(f"{prefix}dead")
            if stored + dead >= n + len(bad) and dead >= len(bad):
                break
            if time.perf_counter() - started > 600:
                raise RuntimeError(f"{label}: {stored} stored, {dead} dead after 600 s")
            await asyncio.sleep(0.05)
        return time.perf_counter() - started, n - stored
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        await redis.aclose()
        await pool.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", type=Path, default=None, help="checkout of the old code")
    ap.add_argument("--old-rounds", type=int, default=1, help="rounds of the (slow) old code")
    args = ap.parse_args()
    codes = [("new", ROOT)] + ([("old", args.old.resolve())] if args.old else [])
    times: dict[tuple[str, str], list[tuple[float, int]]] = {}
    with bench_stack("poison") as settings:
        for r in range(args.rounds):
            for name, code in codes:
                if name == "old" and r >= args.old_rounds:
                    continue
                for case in ("clean", "poison"):
                    t = asyncio.run(
                        one_run(
                            settings, code, n=args.turns, with_poison=case == "poison", label=name
                        )
                    )
                    times.setdefault((name, case), []).append(t)
                    print(
                        f"round {r + 1}: {name} {case}: {t[0]:.2f} s, {t[1]} good turns lost",
                        file=sys.stderr,
                    )
    rows = []
    result: dict[str, Any] = {"turns": args.turns, "poison_entries": 10, "rounds": args.rounds}
    for name, _ in codes:
        clean = min(t[0] for t in times[(name, "clean")])
        bad = min(t[0] for t in times[(name, "poison")])
        lost = max(t[1] for t in times[(name, "poison")])
        ratio = clean / bad
        result[name] = {
            "clean_s": round(clean, 2),
            "poison_s": round(bad, 2),
            "good_turns_lost": lost,
            "clean_turns_per_s": round(args.turns / clean),
            "poison_turns_per_s": round(args.turns / bad),
            "ratio": round(ratio, 3),
        }
        rows.append(
            (
                name,
                f"{clean:.2f}",
                f"{bad:.2f}",
                f"{args.turns / clean:,.0f}",
                f"{args.turns / bad:,.0f}",
                f"{ratio:.2f}",
                str(lost),
            )
        )
    path = write_result("poison", result)
    print(
        table(
            rows,
            (
                "code",
                "clean s",
                "poison s",
                "clean turns/s",
                "poison turns/s",
                "poison/clean",
                "good turns lost",
            ),
        )
    )
    print(f"target: poison/clean >= 0.8   → {path}")


if __name__ == "__main__":
    main()
