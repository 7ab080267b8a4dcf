"""Time (issues 27.2, 27.4, 29.4): one date bound for every parser, ``as_of`` on search,
recall and context, periods resolved against the conversation's own dates, and a
later value presented over the one it replaced.

Real query service in-process over real PostgreSQL and Redis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg

from services.query.app import create_app
from services.query.settings import QuerySettings
from tests.query.helpers import FixedEmbedder, auth, resolver_for, unit
from tests.retrieval.helpers import T, add_turns
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
