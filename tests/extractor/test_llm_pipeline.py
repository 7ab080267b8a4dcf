"""The extractor with a language model (scripted server on loopback), and the sweeper."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from services.extractor.app import create_app as extractor_app
from services.extractor.settings import ExtractorSettings
from services.extractor.stale_sweep import sweep
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from shared.events import EpisodeClosed
from shared.streams import Publisher
from tests.extractor.helpers import NEVER_STALE, episodes_of, facts_of, stream_events, turns
from tests.extractor.scripted_llm import Reply, ScriptedLLM
from tests.support import running, wait_for

SUMMARY = {
    "title": "Checked weather for Silver Spring, MD",
    "summary": "Tim asked about the weather in Silver Spring and said he prefers Celsius.",
    "key_points": ["Weather in Silver Spring was sunny", "Tim prefers Celsius"],
    "outcome": "resolved",
    "topics": ["weather", "units"],
}
FACTS = {
    "facts": [
        {
            "subject": "user",
            "about": "user",
            "content": "Tim prefers Celsius",
            "category": "preference",
            "source": "user_explicit",
            "stated_by": "user",
        },
        {
            "subject": "Tim",
            "about": "user",
            "content": "Tim uses Silver Spring, MD as his location for weather queries",
            "category": "preference",
            "confidence": 0.8,
        },
        {
            "subject": "user",
            "about": "user",
            "content": "Tim may be a meteorologist",
            "confidence": 0.4,
        },
    ]
}

LINES = [
    ("user", "What's the weather in Silver Spring, MD?"),
    ("assistant", "22 degrees and sunny."),
    ("user", "Thanks. I prefer Celsius."),
]


def responder(body: dict[str, Any]) -> Reply:
    prompt = body["messages"][-1]["content"]
    if "structured summary" in prompt:
        return Reply(SUMMARY, usage=(400, 80))
    if "extract any facts" in prompt:
        return Reply(FACTS, usage=(600, 120))
    if "standing instructions and preferences" in prompt:
        return Reply({"facts": []}, usage=(200, 10))
    if "narrative" in prompt:
        return Reply({"summary": "Tim lives near Silver Spring and likes Celsius."})
    return Reply(status=500, raw="{}")


async def _run_conversation(
    make_settings: Callable[..., Any],
    pool: asyncpg.Pool,
    redis: Any,
    user_id: str,
    llm: ScriptedLLM,
) -> tuple[Any, str]:
    ingest = make_settings(IngestSettings)
    settings = make_settings(
        ExtractorSettings,
        stream_prefix=ingest.stream_prefix,
        sweep_interval_s=3600,
        stale_window_minutes=NEVER_STALE,  # no other test's idle episode is swept in
        llm_base_url=llm.base_url,
        llm_model="m",
        llm_invalid_retries=1,
    )
    publisher = Publisher(redis, ingest)
    async with running(ingest_app(ingest)), running(extractor_app(settings)) as client:
        await publisher.publish("turns", turns(user_id, LINES))

        async def stored() -> bool:
            n = await pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", user_id)
            return bool(n == len(LINES))

        await wait_for(stored)
        await publisher.publish(
            "episodes", [EpisodeClosed(user_id=user_id, provider="test", chat_id="c1")]
        )

        async def done() -> Any:
            eps = await episodes_of(pool, user_id)
            ok = eps and (eps[0]["extracted_at"] or eps[0]["extraction_error"])
            return eps[0] if ok else None

        ep = await wait_for(done, message="extraction finished")

        async def counted() -> str | None:
            m = (await client.get("/metrics")).text
            return m if "engram_extract_episodes_total{" in m else None

        metrics = await wait_for(counted)
    return ep, metrics


async def test_summary_and_facts_come_from_the_model(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    with ScriptedLLM(responder) as llm:
        ep, metrics = await _run_conversation(make_settings, pool, redis, user_id, llm)
    s = ep["summary"]
    assert s["title"] == SUMMARY["title"] and s["method"] == "llm" and s["outcome"] == "resolved"
    assert "Silver Spring" in ep["summary_text"] and "weather" in ep["summary_text"]
    facts = {f["content"]: f for f in await facts_of(pool, user_id)}
    assert set(facts) == {
        "Tim prefers Celsius",
        "Tim uses Silver Spring, MD as his location for weather queries",
    }
    assert facts["Tim prefers Celsius"]["confidence"] == pytest.approx(0.9)  # user_explicit
    assert facts["Tim prefers Celsius"]["type"] == "preference"
    assert not facts["Tim prefers Celsius"]["data"]["heuristic"]
    held = await pool.fetch("SELECT content FROM fact_reviews WHERE user_id = $1", user_id)
    assert [h["content"] for h in held] == ["Tim may be a meteorologist"]
    narrative = await pool.fetchval(
        "SELECT summary FROM user_summaries WHERE user_id = $1", user_id
    )
    assert narrative == "Tim lives near Silver Spring and likes Celsius."
    # the transcript the model saw follows Navi's rules
    summary_prompt = next(p for p in llm.prompts() if "structured summary" in p)
    assert "Tim: What's the weather in Silver Spring, MD?" in summary_prompt
    assert "Assistant: 22 degrees and sunny." in summary_prompt
    facts_prompt = next(p for p in llm.prompts() if "extract any facts" in p)
    assert "Monday 08 May 2023" in facts_prompt
    assert 'engram_llm_tokens_total{kind="prompt",purpose="summary"} 400.0' in metrics


async def test_output_that_stays_invalid_is_done_offline_and_recorded(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    def bad(body: dict[str, Any]) -> Reply:
        return Reply("I cannot summarise that, sorry.")

    with ScriptedLLM(bad) as llm:
        ep, metrics = await _run_conversation(make_settings, pool, redis, user_id, llm)
        # summary, facts, standing: each asked, asked again, then done offline (and the
        # narrative after them, the same way)
        asked = [p.split("\n")[0] for p in llm.prompts()][:6]
        again = "That answer was not valid: (root): Invalid JSON"
        assert [a.startswith(again) for a in asked] == [False, True] * 3
        assert "structured summary" in asked[0] and "extract any facts" in asked[2]
        assert "standing instructions" in asked[4]
    # the episode is not lost: summarised and its facts learned by the offline extractor
    assert ep["extracted_at"] is not None and ep["extracted_turn_count"] == 3
    s = ep["summary"]
    assert s["method"] == "heuristic" and "Silver Spring" in ep["summary_text"]
    assert [e.split(":")[0] for e in s["model_errors"]] == ["summary", "facts", "standing"]
    assert "summary:" in ep["extraction_error"] and "invalid output" in ep["extraction_error"]
    assert 'engram_extract_episodes_total{outcome="invalid_output"} 1.0' in metrics
    facts = await facts_of(pool, user_id)
    assert facts and all(f["data"]["heuristic"] for f in facts)
    assert "Tim prefers Celsius." in {f["content"] for f in facts}
    # not asked again until it has new turns
    due = await pool.fetchval("SELECT extract_due FROM episodes WHERE id = $1", ep["id"])
    assert due is False


async def _seed_episode(
    pool: asyncpg.Pool, user_id: str, *, status: str, idle: timedelta, extracted: bool = False
) -> Any:
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    at = datetime.now(UTC) - idle
    return await pool.fetchval(
        """INSERT INTO episodes (id, user_id, provider, chat_id, status, started_at,
                                 last_active_at, turn_count, extracted_at, extracted_turn_count,
                                 updated_at)
           VALUES (gen_random_uuid(), $1, 'test', $2, $3, $4::timestamptz, $4, 2,
                   CASE WHEN $5 THEN $4::timestamptz + interval '1 second' END,
                   CASE WHEN $5 THEN 2 END, $4)
           RETURNING id""",
        user_id,
        f"chat-{status}-{idle.total_seconds()}",
        status,
        at,
        extracted,
    )


async def test_the_sweeper_closes_idle_episodes_and_requeues_late_activity(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    settings = make_settings(ExtractorSettings)
    publisher = Publisher(redis, settings)
    idle_open = await _seed_episode(pool, user_id, status="open", idle=timedelta(minutes=45))
    busy_open = await _seed_episode(pool, user_id, status="open", idle=timedelta(minutes=5))
    done = await _seed_episode(
        pool, user_id, status="closed", idle=timedelta(hours=2), extracted=True
    )
    late = await _seed_episode(
        pool, user_id, status="closed", idle=timedelta(hours=2), extracted=True
    )
    # a turn stored after the extraction (ingest bumps turn_count and last_active_at)
    await pool.execute(
        "UPDATE episodes SET turn_count = 3, extract_due = true, "
        "updated_at = now() - interval '40 minutes' WHERE id = $1",
        late,
    )

    # the sweep reads the whole database: episodes earlier tests left idle are not due
    await pool.execute(
        "UPDATE episodes SET status = 'closed', closed_at = coalesce(closed_at, last_active_at), "
        "extracted_at = coalesce(extracted_at, now()), extracted_turn_count = turn_count, "
        "extract_due = false WHERE user_id <> $1",
        user_id,
    )
    window = timedelta(minutes=30)
    first = await sweep(pool, publisher, idle=window)
    assert {(r.episode_id, r.reason) for r in first} == {(idle_open, "stale"), (late, "stale")}
    rows = {
        r["id"]: r
        for r in await pool.fetch(
            "SELECT id, status, closed_at, last_active_at FROM episodes WHERE user_id = $1", user_id
        )
    }
    assert rows[idle_open]["status"] == "closed"
    assert rows[idle_open]["closed_at"] == rows[idle_open]["last_active_at"]
    assert rows[busy_open]["status"] == "open" and rows[done]["status"] == "closed"
    published = await stream_events(redis, settings.stream("extract"))
    assert {e["episode_id"] for e in published} == {str(idle_open), str(late)}

    # a second sweep inside the window asks for nothing again
    assert await sweep(pool, publisher, idle=window) == []


async def test_stale_episodes_are_extracted_by_the_running_service(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    ingest = make_settings(IngestSettings)
    settings = make_settings(
        ExtractorSettings,
        stream_prefix=ingest.stream_prefix,
        sweep_interval_s=0.2,
        stale_window_minutes=30,
    )
    old = datetime.now(UTC) - timedelta(hours=1)
    publisher = Publisher(redis, ingest)
    async with running(ingest_app(ingest)):
        await publisher.publish("turns", turns(user_id, LINES, start=old))

        async def stored() -> bool:
            n = await pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", user_id)
            return bool(n == len(LINES))

        await wait_for(stored)
        [ep] = await episodes_of(pool, user_id)
        assert ep["status"] == "open"  # nobody closed it
        async with running(extractor_app(settings)):

            async def extracted() -> Any:
                eps = await episodes_of(pool, user_id)
                return eps[0] if eps[0]["extracted_at"] else None

            ep = await wait_for(extracted, message="sweeper closed and extracted it")
        assert ep["status"] == "closed" and ep["summary"]["method"] == "heuristic"
        first_facts = [f["id"] for f in await facts_of(pool, user_id)]
        assert first_facts

        # a late turn lands in the closed episode: it is re-extracted, facts not duplicated
        await publisher.publish(
            "turns",
            turns(
                user_id,
                [("user", "Call me Timmy.")],
                episode_id=ep["id"],
                start=old + timedelta(minutes=2),
            ),
        )

        async def four() -> Any:
            eps = await episodes_of(pool, user_id)
            return eps[0] if eps[0]["turn_count"] == 4 else None

        await wait_for(four)
        await pool.execute(
            "UPDATE episodes SET updated_at = now() - interval '31 minutes' WHERE id = $1", ep["id"]
        )
        async with running(extractor_app(settings)):

            async def again() -> Any:
                eps = await episodes_of(pool, user_id)
                return eps[0] if eps[0]["extracted_turn_count"] == 4 else None

            ep = await wait_for(again, message="re-extraction")
    facts = await facts_of(pool, user_id)
    contents = [f["content"] for f in facts]
    assert "Tim prefers to be called Timmy." in contents
    assert len(contents) == len(set(contents))
    assert [f["id"] for f in facts if f["id"] in first_facts] == first_facts
    assert json.dumps(ep["summary"])  # still a whole summary


STANDING = {
    "facts": [
        {
            "subject": "user",
            "content": "Always give temperatures in Celsius when Tim asks about the weather",
            "category": "instruction",
            "source": "user_explicit",
            "source_context": "I prefer Celsius.",
            "stated_by": "user",
        },
        # not a standing one (another category), and not the user's: both left out
        {"subject": "user", "content": "Tim lives in Maryland", "category": "technical"},
        {
            "subject": "user",
            "content": "Tim prefers short answers",
            "category": "preference",
            "stated_by": "assistant",
        },
    ]
}


async def test_standing_instructions_come_from_the_model_reading_the_user_s_lines(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    def with_standing(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        if "standing instructions and preferences" in prompt:
            return Reply(STANDING, usage=(200, 60))
        if "contradict" in prompt:  # the instruction beside "Tim prefers Celsius"
            return Reply({"contradicts": False, "reason": "one adds to the other"})
        return responder(body)

    with ScriptedLLM(with_standing) as llm:
        ep, _ = await _run_conversation(make_settings, pool, redis, user_id, llm)
    assert ep["summary"]["method"] == "llm"
    rows = await pool.fetch(
        "SELECT type, content, data, source_message_id FROM memory_items "
        "WHERE user_id = $1 AND data ? 'standing'",
        user_id,
    )
    [row] = rows
    assert row["type"] == "instruction" and not row["data"]["heuristic"]
    assert row["content"] == "Always give temperatures in Celsius when Tim asks about the weather"
    said = await pool.fetchval(
        "SELECT content FROM messages WHERE id = $1", row["source_message_id"]
    )
    assert said == "Thanks. I prefer Celsius."
    # the model saw the user's lines only, dated
    prompt = next(p for p in llm.prompts() if "standing instructions and preferences" in p)
    assert "- Thanks. I prefer Celsius." in prompt and "Monday 08 May 2023" in prompt
    assert "22 degrees and sunny" not in prompt
