"""Search as a FastStream request/reply handler on Redis, for callers inside the cluster.

Request: ``await broker.request({"user_id": ..., "query": ..., ...}, channel=search_channel(s))``
with the fields of the HTTP search (``query``, ``limit``, ``theme``, ``types``,
``recency_days``, ``status``, ``include_superseded``). ``user_id`` is required:
the search is scoped to that user exactly as over HTTP. Reply: the HTTP
search's JSON (``mode``, ``results``), or ``{"error": "..."}`` for a bad request.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from services.query.memory.requests import SearchIn
from services.query.memory.search import memory_search
from services.query.memory.state import QueryState
from shared.errors import InvalidRequest
from shared.runtime import Runtime
from shared.settings import CommonSettings


class RpcSearchIn(SearchIn):
    user_id: str = Field(min_length=1, max_length=200)


def search_channel(settings: CommonSettings) -> str:
    return f"{settings.stream_prefix}rpc:search"


def register(rt: Runtime, state: QueryState) -> None:
    @rt.broker.subscriber(search_channel(rt.settings), title="query:rpc:search")
    async def search(body: Any) -> dict[str, Any]:
        try:
            req = RpcSearchIn.model_validate(body)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}"
                for e in exc.errors()[:10]
            ]
            return {"error": "invalid request: " + "; ".join(problems)}
        try:
            result = await memory_search(state, rt.pool, req.params(), user_id=req.user_id)
        except InvalidRequest as exc:
            return {"error": str(exc)}
        return result.as_dict()
