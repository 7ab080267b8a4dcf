"""bench.embed: does the pipeline cost anything on top of the local model?

Publishes 5,000 turns (50 users) on ``turns`` with the local model on, and times
until every message has its vector stored (ingest → ``embed`` → embedder →
PostgreSQL). In the same run the bare model embeds the same texts in the same
batch size, run as the embedder runs it (``embedding_local_workers`` passes at
once, ``embedding_local_threads`` threads each), once before and once after the
pipeline (the mean is used: the machine may be shared); once, for reference, it
also runs one pass at a time on every core. "The same texts" are what the
embedder gives the model for a turn (``store.message_text``: date, speaker,
content), checked against the stored rows after the run. Writes
bench/results/embed.json and prints a table.

Ingest runs as its own process (as deployed); the embedder runs in this process
so the model, loaded once for the bare run, is warm for both. Uses an embedded
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

import asyncpg
import redis.asyncio as aioredis
from pydantic import SecretStr
from tqdm import tqdm

from bench.common import stack
from engram_cli.embedded import free_port
from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.ingest.settings import IngestSettings
from shared.db import connect
from shared.embeddings import local, store
from shared.events import TurnReceived
from shared.migrate import migrate
from shared.streams import Publisher

RESULTS = Path(__file__).parent / "results" / "embed.json"
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


def bare_model(corpus: list[str], workers: int) -> float:
    """The model alone, run as the embedder runs it: ``workers`` passes at once."""
    chunks = [corpus[i : i + BATCH] for i in range(0, len(corpus), BATCH)]
    started = time.perf_counter()
    with (
        ThreadPoolExecutor(workers) as pool,
        tqdm(total=len(chunks), desc="bare model", unit="batch") as bar,
    ):
        for _ in pool.map(lambda chunk: local.encode(chunk, batch_size=BATCH), chunks):
            bar.update()
    return time.perf_counter() - started


async def pipeline(db_url: str, redis_url: str, data_dir: Path, corpus: list[str]) -> float:
    from tests.support import running, start_service, wait_healthy

    prefix = f"bench{uuid.uuid4().hex[:6]}:"
    common = {
        "database_url": SecretStr(db_url),
        "redis_url": SecretStr(redis_url),
        "data_dir": data_dir,
        "stream_prefix": prefix,
    }
    es = EmbedderSettings(
        **common,
        embedding_provider="local",
        embed_batch_size=BATCH,
        embedding_local_batch=BATCH,
        embedder_port=free_port(),
    )
    ingest_settings = IngestSettings(**common, ingest_port=free_port())
    ingest = start_service("ingest", ingest_settings)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    redis = aioredis.from_url(redis_url)
    users = [f"bench-{prefix[5:-1]}-{u}" for u in range(USERS)]
    turns = [
        TurnReceived(
            user_id=users[i % USERS],
            provider="bench",
            chat_id=f"c{i % USERS}",
            role="user",
            content=t,
            occurred_at=AT,
        )
        for i, t in enumerate(corpus)
    ]
    try:
        await wait_healthy(ingest_settings.ingest_port, ingest)
        async with running(embedder_app(es)):
            publisher = Publisher(redis, es)
            started = time.perf_counter()
            for i in range(0, len(turns), 500):
                await publisher.publish("turns", turns[i : i + 500])
            with tqdm(total=len(turns), desc="pipeline", unit="text") as bar:
                while True:
                    done = int(
                        await pool.fetchval(
                            "SELECT count(*) FROM messages WHERE user_id = ANY($1::text[]) "
                            "AND embedding_state = 'ready'",
                            users,
                        )
                    )
                    bar.update(done - bar.n)
                    if done >= len(turns):
                        break
                    # a count over the users' rows costs CPU the model competes for: poll gently
                    await asyncio.sleep(0.25)
            elapsed = time.perf_counter() - started
        errors = await pool.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = ANY($1::text[]) "
            "AND embedding_state <> 'ready'",
            users,
        )
        assert errors == 0, f"{errors} rows not ready"
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
        conn = await connect(db_url, codecs=False)
        await migrate(conn, embedding_dim=384)
        await conn.close()
        print("loading the model…")
        local.encode(model_texts[:BATCH], batch_size=BATCH)  # load + warm up
        # For reference, once: one pass at a time on every core (the default of a
        # process that embeds single queries, and the embedder's before it ran a
        # pass per core).
        local.configure(workers=1, threads=0)
        one_pass_s = bare_model(model_texts, 1)
        # The embedder's configuration, for the bare runs and the pipeline alike.
        config = EmbedderSettings()
        workers = config.embedding_local_workers
        local.configure(workers=workers, threads=config.embedding_local_threads)
        # bare, pipeline, bare, pipeline, …, bare: each pipeline run is compared with
        # the mean of the bare runs either side of it (the machine may be shared),
        # and the median round is reported.
        bare_s = [bare_model(model_texts, workers)]
        pipeline_s: list[float] = []
        for r in range(rounds):
            print(f"round {r + 1} of {rounds}")
            pipeline_s.append(await pipeline(db_url, redis_url, tmp, corpus))
            bare_s.append(bare_model(model_texts, workers))
    ratios = [((bare_s[i] + bare_s[i + 1]) / 2) / p for i, p in enumerate(pipeline_s)]
    mid = sorted(range(rounds), key=lambda i: ratios[i])[rounds // 2]
    model_s = (bare_s[mid] + bare_s[mid + 1]) / 2
    model_rate = n / model_s
    pipeline_rate = n / pipeline_s[mid]
    result = {
        "texts": n,
        "batch_size": BATCH,
        "users": USERS,
        "rounds": rounds,
        "model_seconds": round(model_s, 2),
        "pipeline_seconds": round(pipeline_s[mid], 2),
        "model_seconds_runs": [round(x, 2) for x in bare_s],
        "model_workers": workers,
        "model_threads_per_pass": config.embedding_local_threads,
        "model_one_pass_all_cores_seconds": round(one_pass_s, 2),
        "pipeline_seconds_runs": [round(x, 2) for x in pipeline_s],
        "ratio_runs": [round(x, 3) for x in ratios],
        "model_texts_per_s": round(model_rate, 1),
        "pipeline_texts_per_s": round(pipeline_rate, 1),
        "ratio": round(ratios[mid], 3),
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "note": "median of the rounds; 2-core machine",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{'':<10}{'seconds':>10}{'texts/s':>10}")
    print(f"{'model':<10}{model_s:>10.2f}{model_rate:>10.1f}")
    print(f"{'(1 pass)':<10}{one_pass_s:>10.2f}{n / one_pass_s:>10.1f}")
    print(f"{'pipeline':<10}{pipeline_s[mid]:>10.2f}{pipeline_rate:>10.1f}")
    print(
        f"ratio (pipeline / model), median of {rounds} rounds: {result['ratio']:.3f} "
        f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)}; target ≥ 0.9)"
    )


if __name__ == "__main__":
    asyncio.run(
        main(
            int(sys.argv[1]) if len(sys.argv) > 1 else 5000,
            int(sys.argv[2]) if len(sys.argv) > 2 else 3,
        )
    )
