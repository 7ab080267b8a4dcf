"""Nous F010.3 decision rules, through POST /v1/decisions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from services.query.app import create_app
from services.query.memory.decisions import blob_findings
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from tests.extractor.scripted_llm import Reply, ScriptedLLM
from tests.support import running

CLEAN = "Use direct Anthropic API calls instead of Claude Agent SDK"


@pytest.mark.parametrize(
    "text,finding",
    [
        ("Here's my current status! The plan is ready.", "starts with"),
        ("Now let me write the full spec:", "starts with"),
        ("I'll store summaries as JSONB", "starts with"),
        ("Let me think about caching", "starts with"),
        ("Here is the decision: use JSONB", "starts with"),
        ("## Decision\nUse JSONB", "markdown header"),
        ("🧠 Store episode summaries as JSONB", "emoji"),
        ("| a | b |\n|---|---|", "table"),
    ],
)
def test_response_blobs_are_recognised(text: str, finding: str) -> None:
    assert any(finding in f for f in blob_findings(text))


def test_a_clean_decision_has_no_findings() -> None:
    assert blob_findings(CLEAN) == []
    assert blob_findings("Tag all episodes with the initiating user") == []


async def _post(client: Any, secret: str, description: str) -> Any:
    return await client.post(
        "/v1/decisions",
        json={"description": description},
        headers={"Authorization": f"Bearer {secret}"},
    )


def _warnings(metrics: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("engram_decision_warnings_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_without_a_model_clean_is_stored_blobs_and_long_text_are_refused(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    settings = make_settings(QuerySettings)
    _, secret = await create_key(pool, user_id=user_id)
    async with running(create_app(settings)) as client:
        r = await _post(client, secret, CLEAN)
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["description"] == CLEAN and body["rewritten"] is False
        row = await pool.fetchrow(
            "SELECT type, content, embedding_state, user_id FROM memory_items WHERE id = $1",
            body["id"],
        )
        assert dict(row) == {
            "type": "decision",
            "content": CLEAN,
            "embedding_state": "pending",
            "user_id": user_id,
        }

        r = await _post(client, secret, "x" * 201)
        assert r.status_code == 400
        assert "201 characters" in r.json()["detail"] and "120" in r.json()["detail"]

        r = await _post(client, secret, "Here's my current status! 🧠 All is well.")
        assert r.status_code == 400
        assert "looks like a response" in r.json()["detail"]
        assert "one factual" in r.json()["detail"]

        long_ok = (
            "Store episode summaries as JSONB on close, embed their text, and rank the "
            "current user's episodes above the episodes of other users"
        )
        assert 120 < len(long_ok) <= 200
        r = await _post(client, secret, long_ok)
        assert r.status_code == 201 and "120-character target" in r.json()["warnings"][0]
        metrics = (await client.get("/metrics")).text
    assert _warnings(metrics) >= 3
    embeds = [f for _, f in await redis.xrange(settings.stream("embed"))]
    assert any(body["id"].encode() in f[b"event"] for f in embeds)
    count = await pool.fetchval(
        "SELECT count(*) FROM memory_items WHERE user_id = $1 AND type = 'decision'", user_id
    )
    assert count == 2


async def test_with_a_model_blobs_are_rewritten_to_one_sentence(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    _, secret = await create_key(pool, user_id=user_id)
    with ScriptedLLM() as llm:
        llm.push(
            Reply({"decision": "Store episode summaries as JSONB on close"}),
            Reply({"decision": "Here's the thing: " + "y" * 150}),
        )
        settings = make_settings(QuerySettings, llm_base_url=llm.base_url, llm_model="m")
        async with running(create_app(settings)) as client:
            blob = "Now let me write the full spec:\n## Summaries\nWe store them as JSONB."
            r = await _post(client, secret, blob)
            assert r.status_code == 201, r.text
            body = r.json()
            assert body["description"] == "Store episode summaries as JSONB on close"
            assert body["rewritten"] is True and body["original"] == blob
            assert "Original: Now let me write" in llm.prompts()[0]

            # a rewrite that is itself a blob is refused, not stored
            r = await _post(client, secret, "Let me explain what we decided about caching")
            assert r.status_code == 400 and "could not be rewritten" in r.json()["detail"]
    stored = await pool.fetch("SELECT content FROM memory_items WHERE user_id = $1", user_id)
    assert [s["content"] for s in stored] == ["Store episode summaries as JSONB on close"]


async def test_decisions_need_a_key(make_settings: Callable[..., Any]) -> None:
    async with running(create_app(make_settings(QuerySettings))) as client:
        r = await client.post("/v1/decisions", json={"description": CLEAN})
        assert r.status_code == 401
