"""Time (issues 27.2, 27.4, 29.4): one date bound for every parser, ``as_of`` on search,
recall and context, periods resolved against the conversation's own dates, and a
later value presented over the one it replaced.

Real query service in-process over real PostgreSQL and Redis."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.query.helpers import FixedEmbedder, auth, resolver_for, unit
from tests.retrieval.helpers import T, add_turns, learn
from tests.support import running

Q = unit(1)
FAR = ["9999-12-31", "on December 31, 9999", "December 9999", "0000-01-01", "in 999 years"]


class Embedder(FixedEmbedder):
    """Fixed vectors under a model name, as memories are stored (recall compares
    vectors of one model only)."""

    model = "test-model"


def _app(make_settings: Callable[..., Any], vectors: dict[str, list[float]] | None = None) -> Any:
    embedder = Embedder(vectors or {})
    return create_app(make_settings(QuerySettings), resolver=resolver_for(embedder))


async def test_a_date_past_the_bound_in_a_query_or_a_turn_never_answers_500(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 29.4: "9999-12-31" in a message or query, in every endpoint and tool that
    reads the periods a question names, answers 2xx (the date is read as no date)."""
    await add_turns(pool, user_id, [T(f"the deadline is {t}", Q) for t in FAR])
    h = await auth(pool, user_id)
    async with running(_app(make_settings)) as client:
        for text in FAR:
            query = f"what happened the week before {text}? and yesterday"
            calls = [
                ("/v1/messages/search", {"query": query}),
                ("/v1/context", {"message": query, "token_budget": 500}),
                ("/v1/episodes/search", {"query": query}),
                ("/v1/recall", {"query": query}),
                ("/v1/memory/search", {"query": query}),
                ("/v1/tools/call", {"name": "context", "arguments": {"message": query}}),
                ("/v1/tools/call", {"name": "episode_recall", "arguments": {"query": query}}),
            ]
            for path, body in calls:
                r = await client.post(path, json=body, headers=h)
                assert r.status_code == 200, (path, text, r.status_code, r.text)
                if path == "/v1/tools/call":
                    assert not r.json()["is_error"], (text, r.text)


def _at(month: int, day: int) -> datetime:
    return datetime(2024, month, day, 12, tzinfo=UTC)


async def _learned(
    pool: asyncpg.Pool, user_id: str, text: str, at: datetime, vector: list[float]
) -> uuid.UUID:
    """A memory learned from a turn said at ``at`` (as the extractor stores one)."""
    _, [turn] = await add_turns(pool, user_id, [T(text, vector, at=at)])
    return await learn(pool, user_id, turn, text, vector)


async def test_as_of_reads_the_value_valid_then_and_now_the_newest_with_what_it_replaced(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 27.2 / 27.4: a memory is valid from the turn it was learned from; its
    successor closes it there. as_of reads the value valid then; now reads the newest,
    which says what it replaced and since when, in recall and in the context."""
    old = await _learned(pool, user_id, "The project deadline is on June 1", _at(3, 1), Q)
    new = await _learned(
        pool, user_id, "The project deadline has been moved to June 15", _at(5, 10), Q
    )
    rows = {
        r["id"]: r
        for r in await pool.fetch(
            "SELECT id, valid_from, valid_to, superseded_by FROM memory_items WHERE user_id = $1",
            user_id,
        )
    }
    assert rows[old]["superseded_by"] == new
    assert rows[old]["valid_from"] == _at(3, 1) and rows[old]["valid_to"] == _at(5, 10)
    assert rows[new]["valid_from"] == _at(5, 10) and rows[new]["valid_to"] is None
    h = await auth(pool, user_id)
    async with running(_app(make_settings, {"project deadline": Q})) as client:

        async def recalled(**kw: Any) -> list[dict[str, Any]]:
            body = {"query": "project deadline", **kw}
            r = await client.post("/v1/recall", json=body, headers=h)
            assert r.status_code == 200, r.text
            return list(r.json()["results"])

        assert [m["id"] for m in await recalled(as_of="2024-04-01T00:00:00Z")] == [str(old)]
        assert [m["id"] for m in await recalled(as_of="2024-06-01T00:00:00Z")] == [str(new)]
        assert await recalled(as_of="2024-02-01T00:00:00Z") == []  # nothing known yet
        [now] = await recalled()
        assert now["id"] == str(new)
        assert now["replaced"]["content"] == "The project deadline is on June 1"
        assert now["replaced"]["valid_to"].startswith("2024-05-10")
        # the tool reads the same
        r = await client.post(
            "/v1/tools/call",
            json={
                "name": "recall",
                "arguments": {"query": "project deadline", "as_of": "2024-04-01"},
            },
            headers=h,
        )
        assert [m["id"] for m in r.json()["result"]["results"]] == [str(old)], r.text
        # the context: the newest first, the turn it replaced marked with when
        r = await client.post("/v1/context", json={"message": "project deadline"}, headers=h)
        lines = r.json()["text"].splitlines()
        first = next(n for n, x in enumerate(lines) if "moved to June 15" in x)
        replaced = next(n for n, x in enumerate(lines) if "is on June 1" in x)
        assert first < replaced and lines[replaced].endswith("[replaced on 2024-05-10]"), lines
        # ... and the memory line itself, when its turn is not shown, says the same
        await pool.execute("UPDATE memory_items SET source_message_id = NULL WHERE id = $1", new)
        r = await client.post("/v1/context", json={"message": "project deadline"}, headers=h)
        assert (
            "moved to June 15 (updated 2024-05-10; before: The project deadline is on June 1"
            in (r.json()["text"])
        )
        r = await client.post(
            "/v1/context",
            json={"message": "project deadline", "as_of": "2024-04-01T00:00:00Z"},
            headers=h,
        )
        # the value valid then (its turn, or the memory learned from it), nothing later
        text = r.json()["text"]
        assert "deadline is on June 1" in text and "June 15" not in text, text
        # a time outside the one bound is a 422 naming the field, never a 500
        r = await client.post(
            "/v1/recall", json={"query": "x", "as_of": "9999-12-31T00:00:00Z"}, headers=h
        )
        assert r.status_code == 422 and "as_of" in r.text, r.text


async def test_the_week_before_an_event_ranks_a_turn_of_that_week_first(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 27.2: "the week before X" (X a date, an event of the conversation, or
    "last week" seen from the conversation's own latest turn, not the wall clock)
    lifts the turns of that week above the same words said at other times."""
    said = "I fixed the login bug in the checkout page"
    turns = {
        "april": _at(4, 2),
        "week before": _at(5, 14),
        "after": _at(5, 24),
    }
    ids = {}
    for name, at in turns.items():
        _, [ids[name]] = await add_turns(pool, user_id, [T(said, Q, at=at)])
    await add_turns(pool, user_id, [T("We launched the new app today!", unit(2), at=_at(5, 20))])
    await add_turns(pool, user_id, [T("Quiet weekend at home", unit(3), at=_at(5, 27))])
    h = await auth(pool, user_id)
    async with running(_app(make_settings)) as client:
        for query in (
            "which bug did I fix the week before May 20, 2024?",
            "which bug did I fix the week before the launch?",
            "which bug did I fix the week before we launched?",
        ):
            r = await client.post("/v1/messages/search", json={"query": query}, headers=h)
            assert r.status_code == 200, r.text
            assert r.json()["results"][0]["id"] == ids["week before"], (query, r.text)
        # "last week" from the conversation's latest turn (Monday 27 May 2024 is in
        # the week of 27 May; last week is 20-26 May), not from today's date
        r = await client.post(
            "/v1/messages/search", json={"query": "which bug did I fix last week?"}, headers=h
        )
        assert r.json()["results"][0]["id"] == ids["after"], r.text
        # as_of moves the conversation's now: last week seen from 21 May is 13-19 May
        r = await client.post(
            "/v1/messages/search",
            json={"query": "which bug did I fix last week?", "as_of": "2024-05-21T00:00:00Z"},
            headers=h,
        )
        assert [x["id"] for x in r.json()["results"]][0] == ids["week before"], r.text
        assert ids["after"] not in [x["id"] for x in r.json()["results"]]
