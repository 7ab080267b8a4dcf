"""A real model's answers, replayed to the extractor by a scripted server on loopback.

``model_answers.json`` holds what Gemma 3 270M (Q4_K_M, llama-cpp-python's server,
the job's JSON schema in ``response_format``) answered to the extractor's prompts on
a LoCoMo session and dedupe questions, recorded by ``python -m bench.extract_model
--record``. Its summary, facts, standing-instruction, equivalence and contradiction
answers had the schema's shape but copied the prompt's ``<...>`` placeholders
(invalid: ``shared.llm.schemas.not_a_placeholder``); one facts answer was cut at
max_tokens; one narrative is valid. Valid answers are used as they are; a job whose
answers stay malformed is done offline and the episode is never lost.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import ValidationError

from bench.extract_model import SCHEMAS, job_of
from services.extractor.service import Extraction, extract_episode
from services.extractor.settings import ExtractorSettings
from shared.events import ExtractRequested
from shared.llm.client import OpenAIChatModel, parse_json_output
from shared.llm.jobs import LLMExtractor, OfflineOnInvalid
from shared.llm.offline import OfflineExtractor
from shared.streams import Publisher
from tests.extractor.helpers import T0, facts_of
from tests.extractor.scripted_llm import Reply, ScriptedLLM
from tests.query.helpers import LocalModel

ANSWERS = json.loads((Path(__file__).parent / "model_answers.json").read_text())["answers"]

LINES = [
    ("user", "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful."),
    ("assistant", "Wow Caroline, that's great! What happened there?"),
    ("user", "The transgender stories were inspiring. I'm going to keep studying counseling."),
    ("assistant", "That's awesome. I just signed up for a pottery class, it's so relaxing."),
    ("user", "Pottery sounds fun! I love painting landscapes myself."),
]


class Embedder(LocalModel):
    provider = "local"
    model = "all-MiniLM-L6-v2"


def by_job(valid: bool) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for a in ANSWERS:
        if a["valid"] == valid:
            out[a["job"]].append(a["content"])
    return out


def test_the_recorded_answers_are_judged_as_the_fixture_says() -> None:
    """Each answer is valid exactly when the fixture says so: a narrative; not the
    answers that copy the prompt's placeholders, nor a facts answer cut at max_tokens."""
    assert [a["job"] for a in ANSWERS if a["valid"]] == ["narrative"]
    assert any(a["finish_reason"] == "length" and not a["valid"] for a in ANSWERS)
    for a in ANSWERS:
        try:
            parse_json_output(a["content"], SCHEMAS[a["job"]])
            valid = True
        except (ValidationError, ValueError):
            valid = False
        assert valid == a["valid"], a
        if not valid:
            assert ("placeholder" if a["finish_reason"] == "stop" else "EOF") in a["error"]


async def test_the_model_s_dedupe_answers_with_placeholders_are_not_taken() -> None:
    """It said "same" (and "contradicts") to every pair, a placeholder for its reason:
    the offline rule decides instead, and keeps two different facts apart."""
    answers = [a for a in ANSWERS if a["job"] in ("equivalence", "contradiction")]
    assert answers and all(not a["valid"] for a in answers)
    assert all(json.loads(a["content"]).get("same", True) for a in answers)
    with ScriptedLLM() as llm:
        llm.push(*[Reply(a["content"]) for a in answers])
        client = OpenAIChatModel(
            base_url=llm.base_url, model="gemma-3-270m", max_retries=0, invalid_retries=0
        )
        ex = OfflineOnInvalid(LLMExtractor(client), OfflineExtractor())
        try:
            for a in answers:
                if a["job"] == "equivalence":
                    assert not await ex.same_fact(
                        "Caroline is studying counseling.", "Melanie ran a charity race."
                    )
                else:
                    assert await ex.contradicts("Caroline lives in Boston.", "x") is None
        finally:
            await client.aclose()
    assert len(llm.requests) == len(answers)
    assert ex.offline_jobs == [a["job"] for a in answers]


async def _episode(pool: asyncpg.Pool, user_id: str) -> uuid.UUID:
    episode_id = uuid.uuid4()
    await pool.execute(
        "INSERT INTO users (id, display_name) VALUES ($1, 'Caroline') ON CONFLICT DO NOTHING",
        user_id,
    )
    await pool.execute(
        """INSERT INTO episodes (id, user_id, provider, chat_id, status, started_at,
                                 last_active_at, closed_at, closed_by, turn_count, extract_due)
           VALUES ($1, $2, 'test', 'c1', 'closed', $3, $3, $3, 'event', $4, true)""",
        episode_id,
        user_id,
        T0,
        len(LINES),
    )
    for i, (role, text) in enumerate(LINES):
        await pool.execute(
            """INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role,
                                     display_name, content, occurred_at)
               VALUES ($1, $2, $3, 'test', 'c1', $4, $5, $6, $7)""",
            uuid.uuid4(),
            user_id,
            episode_id,
            role,
            "Caroline" if role == "user" else "Melanie",
            text,
            T0 + timedelta(seconds=30 * i),
        )
    return episode_id


async def _extract(
    make_settings: Callable[..., Any],
    pool: asyncpg.Pool,
    redis: Any,
    user_id: str,
    replies: dict[str, list[str]],
) -> tuple[Any, ScriptedLLM, str]:
    """Extract one episode against a server answering each job with its next reply
    (the last one again when they run out); jobs without replies get a 500."""
    queues = {job: deque(r) for job, r in replies.items()}

    def responder(body: dict[str, Any]) -> Reply:
        queue = queues.get(job_of(body["messages"][1]["content"]))
        if not queue:
            return Reply(status=500, raw='{"error": "no answer recorded for this job"}')
        return Reply(queue.popleft() if len(queue) > 1 else queue[0])

    embedder = Embedder()

    async def embedder_for(_: str) -> Embedder:
        return embedder

    with ScriptedLLM(responder) as llm:
        client = OpenAIChatModel(
            base_url=llm.base_url, model="gemma-3-270m", invalid_retries=1, max_retries=0
        )
        x = Extraction(
            pool=pool,
            publisher=Publisher(redis, make_settings(ExtractorSettings)),
            extractor=LLMExtractor(client),
            embedder_for=embedder_for,
            dim=384,
        )
        episode_id = await _episode(pool, user_id)
        try:
            outcome = await extract_episode(
                x, ExtractRequested(episode_id=episode_id, user_id=user_id, reason="manual")
            )
        finally:
            await client.aclose()
    ep = await pool.fetchrow(
        "SELECT summary, summary_text, extraction_error, extract_due FROM episodes WHERE id = $1",
        episode_id,
    )
    return ep, llm, outcome


async def test_the_model_s_malformed_answers_fall_back_without_losing_the_episode(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    """Every job answered as the model answered, in the order recorded (the last answer
    again when asked more often): summary, facts and standing instructions stay
    malformed (placeholders, a facts answer cut short), so each is asked again once,
    then done offline; the narrative's second answer is valid and used."""
    replies: dict[str, list[str]] = defaultdict(list)
    for a in ANSWERS:
        replies[a["job"]].append(a["content"])
    ep, llm, outcome = await _extract(make_settings, pool, redis, user_id, replies)
    assert outcome == "invalid_output" and ep["extract_due"] is False
    summary = ep["summary"]
    assert summary["method"] == "heuristic" and "Caroline" in ep["summary_text"]
    assert "<" not in summary["title"]
    assert [e.split(":")[0] for e in summary["model_errors"]] == ["summary", "facts", "standing"]
    assert ep["extraction_error"].startswith("summary: ")
    asked = [job_of(r["body"]["messages"][1]["content"]) for r in llm.requests]
    for job in ("summary", "facts", "standing"):
        assert asked.count(job) == 2  # asked again once with the error, then offline
    facts = await facts_of(pool, user_id)
    assert facts and all(f["data"]["heuristic"] for f in facts)  # the offline extractor's
    assert not any(f["content"].startswith("<") for f in facts)
    narrative = await pool.fetchval(
        "SELECT summary FROM user_summaries WHERE user_id = $1", user_id
    )
    said = [json.loads(a["content"])["summary"] for a in ANSWERS if a["valid"]]
    assert narrative == said[0]  # the model's valid answer, asked again once
    assert asked.count("narrative") == 2
