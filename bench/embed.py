"""bench.embed: the local models, bare and through the pipeline, side by side.

For each local model (PyTorch ``all-MiniLM-L6-v2`` and ONNX int8
``all-MiniLM-L6-v2-int8``): publishes 5,000 turns (50 users) on ``turns`` and
times until every message has its vector stored (ingest → ``embed`` → embedder →
PostgreSQL). In the same run the bare model embeds the same texts in the same
batch size, run as the embedder runs it (``embedding_local_workers`` passes at
once, ``embedding_local_threads`` threads each), before and after each pipeline
run (the mean of the two is used: the machine may be shared); the models
alternate round by round. Once, for reference, each also runs one pass at a
time on every core. "The same texts" are what the embedder gives the model for a
turn (``store.message_text``: date, speaker, content), checked against the
stored rows after the run. Writes bench/results/embed.json and prints a table.

``python -m bench.embed live [rates [seconds [models]]]`` (``make
bench-live``) measures time to searchable instead: turns published at steady
rates, p50/p95/p99 from XADD to the row's vector, the highest rate kept up (see
``live``); bench/results/embed_live.json.

Ingest runs as its own process (as deployed); the embedder runs in this process
so the models, loaded once for the bare runs, are warm for both. Uses an embedded
PostgreSQL and Redis in a temp dir unless ENGRAM_DATABASE_URL / ENGRAM_REDIS_URL
are set. Run: ``python -m bench.embed [turns [rounds]]`` (or ``make bench-embed``):
3 rounds by default, the median reported.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from pydantic import SecretStr
from tqdm import tqdm

from bench.common import stack
from engram_cli.embedded import free_port
from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.ingest.settings import IngestSettings
from shared.embeddings import local, store
from shared.events import TurnReceived
from shared.migrate import apply
from shared.streams import Publisher

RESULTS = Path(__file__).parent / "results" / "embed.json"
LABELS = {local.MODEL_NAME: "PyTorch", local.INT8_MODEL: "ONNX int8"}
# CPU seconds of each bare run (wall time moves with the machine's load; CPU time less).
CPU_S: dict[str, list[float]] = {m: [] for m in local.MODELS}
BATCH = 64
USERS = 50
# Every turn's time, so the text the embedder builds for it is known in advance.
AT = datetime(2026, 5, 14, 9, 30, tzinfo=UTC)

SUBJECTS = [
    "my sister",
    "the landlord",
    "our team",
    "the dentist",
    "my kid",
    "the bank",
    "grandma",
    "the new manager",
    "my neighbour",
    "the plumber",
    "my partner",
]
VERBS = [
    "called about",
    "reminded me of",
    "asked me to reschedule",
    "complained about",
    "sent a note about",
    "wants to talk about",
    "forgot",
    "is excited about",
]
OBJECTS = [
    "the quarterly report",
    "Saturday's birthday party",
    "the broken heater",
    "a vegan recipe for lasagne",
    "the flight to Lisbon on the 14th",
    "renewing the passport",
    "the invoice from March",
    "piano lessons on Tuesdays",
    "the leaking kitchen tap",
    "a hiking trip in the Alps",
    "the school play",
]
TAILS = [
    "",
    " and I need to answer by Friday",
    " — can you remind me tomorrow?",
    ", which I keep forgetting",
    " and it is costing us money",
    " again",
    ". Please note that I prefer mornings for calls.",
]


def texts(n: int) -> list[str]:
    rng = random.Random(42)
    return [
        f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        f"{rng.choice(TAILS)} (note {i})"
        for i in range(n)
    ]


def model_text(content: str) -> str:
    """What the embedder gives the model for one of the bench's turns."""
    return store.message_text(content, "user", None, None, None, speaker=None, at=AT)


def bare_model(corpus: list[str], workers: int, model: str) -> float:
    """The model alone, run as the embedder runs it: ``workers`` passes at once.
    Returns seconds; adds the process's CPU seconds to ``CPU_S[model]``."""
    chunks = [corpus[i : i + BATCH] for i in range(0, len(corpus), BATCH)]
    cpu = time.process_time()
    started = time.perf_counter()
    with (
        ThreadPoolExecutor(workers) as pool,
        tqdm(total=len(chunks), desc=f"bare {LABELS[model]}", unit="batch") as bar,
    ):
        for _ in pool.map(lambda chunk: local.encode(chunk, batch_size=BATCH, model=model), chunks):
            bar.update()
    elapsed = time.perf_counter() - started
    CPU_S[model].append(time.process_time() - cpu)
    return elapsed


def embedder_settings(common: dict[str, Any], model: str) -> EmbedderSettings:
    return EmbedderSettings(
        **common,
        embedding_provider="local",
        embedding_model=model,
        embed_batch_size=BATCH,
        embedding_local_batch=BATCH,
        embedder_port=free_port(),
    )


def bench_turns(users: list[str], corpus: list[str]) -> list[TurnReceived]:
    return [
        TurnReceived(
            user_id=users[i % len(users)],
            provider="bench",
            chat_id=f"c{i % len(users)}",
            role="user",
            content=t,
            occurred_at=AT,
        )
        for i, t in enumerate(corpus)
    ]


async def pipeline(
    db_url: str, redis_url: str, data_dir: Path, corpus: list[str], model: str
) -> float:
    from tests.support import running, start_service, wait_healthy

    prefix = f"bench{uuid.uuid4().hex[:6]}:"
    common: dict[str, Any] = {
        "database_url": SecretStr(db_url),
        "redis_url": SecretStr(redis_url),
        "data_dir": data_dir,
        "stream_prefix": prefix,
    }
    es = embedder_settings(common, model)
    ingest_settings = IngestSettings(**common, ingest_port=free_port())
    ingest = start_service("ingest", ingest_settings)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    redis = aioredis.from_url(redis_url)
    users = [f"bench-{prefix[5:-1]}-{u}" for u in range(USERS)]
    turns = bench_turns(users, corpus)
    try:
        await wait_healthy(ingest_settings.ingest_port, ingest)
        app = embedder_app(es)
        registry = app.state.runtime.metrics.registry
        labels = {"provider": "local", "outcome": "ready"}

        def stored() -> float:
            """Rows the embedder has committed as ready (its own counter, read in-process)."""
            return registry.get_sample_value("engram_embed_texts_total", labels) or 0.0

        async with running(app):
            publisher = Publisher(redis, es)
            before = stored()
            started = time.perf_counter()
            for i in range(0, len(turns), 500):
                await publisher.publish("turns", turns[i : i + 500])
            with tqdm(total=len(turns), desc=f"pipeline {LABELS[model]}", unit="text") as bar:
                while True:
                    # The embedder's counter, bumped after each write commits, is free to
                    # read: a count over the users' rows costs CPU the model competes for
                    # and was polled every 0.25 s, up to that much late. The count
                    # confirms the end.
                    done = int(stored() - before)
                    bar.update(min(done, len(turns)) - bar.n)
                    if done >= len(turns):
                        ready = await pool.fetchval(
                            "SELECT count(*) FROM messages WHERE user_id = ANY($1::text[]) "
                            "AND embedding_state = 'ready'",
                            users,
                        )
                        if int(ready) >= len(turns):
                            break
                    await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - started
        errors = await pool.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = ANY($1::text[]) "
            "AND (embedding_state <> 'ready' OR embedding_model <> $2)",
            users,
            model,
        )
        assert errors == 0, f"{errors} rows not ready with {model}"
        rows = await pool.fetch(
            "SELECT content, role, display_name, occurred_at FROM messages "
            "WHERE user_id = ANY($1::text[])",
            users,
        )
        embedded = {
            store.message_text(
                r["content"],
                r["role"],
                None,
                None,
                None,
                speaker=r["display_name"],
                at=r["occurred_at"],
            )
            for r in rows
        }
        assert embedded == {model_text(t) for t in corpus}, "the bare model saw other texts"
        return elapsed
    finally:
        ingest.terminate()
        ingest.wait(10)
        await redis.aclose()
        await pool.close()


async def main(n: int, rounds: int) -> None:
    corpus = texts(n)
    model_texts = [model_text(t) for t in corpus]
    with stack() as (db_url, redis_url, tmp):
        assert redis_url is not None
        await apply(db_url, embedding_dim=384)
        config = EmbedderSettings()
        workers = config.embedding_local_workers
        local.configure(workers=1, threads=0, cache_dir=tmp / "models")
        print("loading the models…")
        for model in local.MODELS:
            local.encode(model_texts[:BATCH], batch_size=BATCH, model=model)  # load + warm up
        # For reference, once: one pass at a time on every core (the default of a
        # process that embeds single queries, and the embedder's before it ran a
        # pass per core).
        one_pass_s = {m: bare_model(model_texts, 1, m) for m in local.MODELS}
        # The embedder's configuration, for the bare runs and the pipeline alike.
        local.configure(workers=workers, threads=config.embedding_local_threads)
        # Per model: bare, pipeline, bare, pipeline, …, bare, the models alternated
        # round by round: each pipeline run is compared with the mean of its model's
        # bare runs either side of it (the machine may be shared), and the median
        # round is reported.
        bare_s: dict[str, list[float]] = {m: [] for m in local.MODELS}
        pipeline_s: dict[str, list[float]] = {m: [] for m in local.MODELS}
        for m in local.MODELS:
            bare_s[m].append(bare_model(model_texts, workers, m))
        for r in range(rounds):
            print(f"round {r + 1} of {rounds}")
            for m in local.MODELS:
                pipeline_s[m].append(await pipeline(db_url, redis_url, tmp, corpus, m))
                bare_s[m].append(bare_model(model_texts, workers, m))
    models: dict[str, dict[str, Any]] = {}
    for m in local.MODELS:
        b, p = bare_s[m], pipeline_s[m]
        ratios = [((b[i] + b[i + 1]) / 2) / x for i, x in enumerate(p)]
        mid = sorted(range(rounds), key=lambda i: ratios[i])[rounds // 2]
        model_s = (b[mid] + b[mid + 1]) / 2
        models[m] = {
            "model_seconds": round(model_s, 2),
            "pipeline_seconds": round(p[mid], 2),
            "model_seconds_runs": [round(x, 2) for x in b],
            "pipeline_seconds_runs": [round(x, 2) for x in p],
            "model_one_pass_all_cores_seconds": round(one_pass_s[m], 2),
            "ratio_runs": [round(x, 3) for x in ratios],
            "model_texts_per_s": round(n / model_s, 1),
            "pipeline_texts_per_s": round(n / p[mid], 1),
            "ratio": round(ratios[mid], 3),
            # the embedder's configuration only (the first run is the one-pass reference)
            "model_texts_per_cpu_s": round(n * (len(CPU_S[m]) - 1) / sum(CPU_S[m][1:]), 1),
        }
    torch_m, int8_m = models[local.MODEL_NAME], models[local.INT8_MODEL]
    # int8 over PyTorch, bare model: the sum of all bare runs of each (interleaved).
    speedup = sum(bare_s[local.MODEL_NAME]) / sum(bare_s[local.INT8_MODEL])
    result = {
        "texts": n,
        "batch_size": BATCH,
        "users": USERS,
        "rounds": rounds,
        "model_workers": workers,
        "model_threads_per_pass": config.embedding_local_threads,
        "models": models,
        "int8_over_pytorch_bare": round(speedup, 2),
        "int8_over_pytorch_bare_cpu": round(
            models[local.INT8_MODEL]["model_texts_per_cpu_s"]
            / models[local.MODEL_NAME]["model_texts_per_cpu_s"],
            2,
        ),
        "int8_over_pytorch_pipeline": round(
            sum(pipeline_s[local.MODEL_NAME]) / sum(pipeline_s[local.INT8_MODEL]), 2
        ),
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "note": "median of the rounds; models alternated in one run; 2-core machine "
        "shared with other work while measured",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\n{'':<12}{'model s':>9}{'texts/s':>9}{'/CPU-s':>8}{'1 pass s':>10}{'pipeline s':>12}"
        f"{'texts/s':>9}{'ratio':>7}"
    )
    for m in local.MODELS:
        r = models[m]
        print(
            f"{LABELS[m]:<12}{r['model_seconds']:>9.2f}{r['model_texts_per_s']:>9.1f}"
            f"{r['model_texts_per_cpu_s']:>8.1f}"
            f"{r['model_one_pass_all_cores_seconds']:>10.2f}{r['pipeline_seconds']:>12.2f}"
            f"{r['pipeline_texts_per_s']:>9.1f}{r['ratio']:>7.3f}"
        )
    print(
        f"int8 / PyTorch, bare model: {speedup:.2f}x texts/s, "
        f"{result['int8_over_pytorch_bare_cpu']:.2f}x texts/CPU-s (target ≥ 2.5); "
        "pipeline / bare on "
        f"int8 {int8_m['ratio']:.3f}, on PyTorch {torch_m['ratio']:.3f} (target ≥ 0.9)"
    )


LIVE_RESULTS = Path(__file__).parent / "results" / "embed_live.json"
LIVE_CHATS = 50


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def live_step(
    publisher: Publisher,
    pool: asyncpg.Pool,
    users: list[str],
    rate: float,
    seconds: float,
    step: int,
) -> dict[str, Any]:
    """Publish ``rate`` turns/s spread over the chats for ``seconds``, one XADD per
    turn on its schedule; then the time from each XADD to its row's vector."""
    corpus = texts(int(rate * seconds))
    turns = bench_turns(users, [f"{t} [live {step}]" for t in corpus])
    sent: dict[str, float] = {}
    started = time.perf_counter()
    behind = 0.0
    for i, turn in enumerate(turns):
        due = started + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            behind = max(behind, -wait)
        sent[turn.content] = time.time()
        await publisher.publish("turns", [turn])
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        done = await pool.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = ANY($1::text[]) "
            "AND embedding_state = 'ready' AND content LIKE $2",
            users,
            f"%[live {step}]",
        )
        if done >= len(turns):
            break
        await asyncio.sleep(0.5)
    rows = await pool.fetch(
        "SELECT content, extract(epoch FROM embedded_at)::float8 AS at FROM messages "
        "WHERE user_id = ANY($1::text[]) AND content LIKE $2",
        users,
        f"%[live {step}]",
    )
    ready = [r["at"] - sent[r["content"]] for r in rows if r["at"] is not None]
    missing = len(turns) - len(ready)
    # A turn not ready within the wait counts as the wait's length (it only raises them).
    latencies = ready + [120.0] * missing
    p95 = percentile(latencies, 95)
    return {
        "rate_turns_per_s": rate,
        "seconds": seconds,
        "turns": len(turns),
        "publisher_behind_max_s": round(behind, 3),
        "not_ready": missing,
        "p50_s": round(percentile(latencies, 50), 3),
        "p95_s": round(p95, 3),
        "p99_s": round(percentile(latencies, 99), 3),
        "max_s": round(max(latencies), 3),
        "keeps_up": p95 <= 1.0 and missing == 0,
    }


async def live(model: str, rates: list[float], seconds: float) -> dict[str, Any]:
    """Time to searchable: turns published at a steady rate (``LIVE_CHATS`` chats,
    each a user of its own), from XADD on ``turns`` to the row's vector stored
    (``messages.embedded_at``, the embedding transaction's start; its commit follows
    within milliseconds). Rates run from low to high; the run stops after the first
    rate the embedder does not keep up with (p95 > 1 s)."""
    from tests.support import running, start_service, wait_healthy

    steps: list[dict[str, Any]] = []
    with stack() as (db_url, redis_url, tmp):
        assert redis_url is not None
        await apply(db_url, embedding_dim=384)
        common: dict[str, Any] = {
            "database_url": SecretStr(db_url),
            "redis_url": SecretStr(redis_url),
            "data_dir": tmp,
            "stream_prefix": "live:",
        }
        es = embedder_settings(common, model)
        local.configure(
            workers=es.embedding_local_workers,
            threads=es.embedding_local_threads,
            cache_dir=tmp / "models",
        )
        local.encode(["warm up"], batch_size=BATCH, model=model)
        ingest_settings = IngestSettings(**common, ingest_port=free_port())
        ingest = start_service("ingest", ingest_settings)
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
        redis = aioredis.from_url(redis_url)
        users = [f"live-{u}" for u in range(LIVE_CHATS)]
        try:
            await wait_healthy(ingest_settings.ingest_port, ingest)
            async with running(embedder_app(es)):
                publisher = Publisher(redis, es)
                for step, rate in enumerate(rates):
                    print(f"{LABELS[model]}: {rate:g} turns/s for {seconds:g} s…")
                    result = await live_step(publisher, pool, users, rate, seconds, step)
                    print("  ", result)
                    steps.append(result)
                    if not result["keeps_up"]:
                        break
        finally:
            ingest.terminate()
            ingest.wait(10)
            await redis.aclose()
            await pool.close()
    kept = [s["rate_turns_per_s"] for s in steps if s["keeps_up"]]
    return {
        "model": model,
        "chats": LIVE_CHATS,
        "steps": steps,
        "highest_rate_kept_up": max(kept) if kept else None,
    }


async def live_main(args: list[str]) -> None:
    """``live [rates] [seconds] [models]``: rates comma-separated turns/s (default
    50,100,200,400), seconds per rate (default 20), models comma-separated (default
    both local models)."""
    rates = [float(r) for r in (args[0] if args else "50,100,200,400").split(",")]
    seconds = float(args[1]) if len(args) > 1 else 20.0
    models = args[2].split(",") if len(args) > 2 else list(local.MODELS)
    runs = [await live(m, rates, seconds) for m in models]
    result = {
        "runs": runs,
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "note": "keeps up = p95 from XADD to vector stored <= 1 s and every turn ready; "
        "2-core machine shared with other work while measured",
    }
    LIVE_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    LIVE_RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'':<12}{'turns/s':>8}{'p50 s':>8}{'p95 s':>8}{'p99 s':>8}{'keeps up':>10}")
    for run in runs:
        for st in run["steps"]:
            print(
                f"{LABELS[run['model']]:<12}{st['rate_turns_per_s']:>8g}{st['p50_s']:>8.3f}"
                f"{st['p95_s']:>8.3f}{st['p99_s']:>8.3f}{'yes' if st['keeps_up'] else 'no':>10}"
            )
        print(f"{LABELS[run['model']]}: highest steady rate kept up: {run['highest_rate_kept_up']}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "live":
        asyncio.run(live_main(sys.argv[2:]))
    else:
        asyncio.run(
            main(
                int(sys.argv[1]) if len(sys.argv) > 1 else 5000,
                int(sys.argv[2]) if len(sys.argv) > 2 else 3,
            )
        )
