"""Ash's ``remember`` and ``recall`` as LLM tools: schemas and one executor.

The schemas are built from the same request models as the HTTP routes (the
seed's argument names; the chat comes from the call's context), in the neutral
``{name, description, parameters}`` form rendered as OpenAI or Anthropic tools.
:func:`call_people_tool` validates the arguments with the same models as the
HTTP routes and runs the same use cases; bad arguments raise InvalidRequest with
a message written for the model. The chat a tool call happens in comes from the
call's context (the agent's session), not from the model.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import ValidationError

from services.query.people_api import RecallIn, RememberIn, do_recall, do_remember
from services.query.tool_specs import ToolSpec, neutral
from shared.errors import InvalidRequest
from shared.memory.vectors import ModelEmbedder
from shared.memory.writer import Chat
from shared.streams import Publisher

_REMEMBER_ARGS = {"content", "facts", "subjects", "expires_in_days", "shared"}
_RECALL_ARGS = {"query", "about", "as_of"}

REMEMBER = ToolSpec(
    name="remember",
    description="Store a fact or preference in long-term memory",
    model=RememberIn,
    only=_REMEMBER_ARGS,
)
RECALL = ToolSpec(
    name="recall",
    description="Search memory for relevant information",
    model=RecallIn,
    only=_RECALL_ARGS,
)
PEOPLE_SPECS = [REMEMBER, RECALL]
PEOPLE_TOOLS = [neutral(s) for s in PEOPLE_SPECS]
NAMES = frozenset(s.name for s in PEOPLE_SPECS)


def _problems(exc: ValidationError) -> str:
    out = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
        out.append(f"{loc}: {err['msg']}")
    return "; ".join(out)


def _only(args: dict[str, Any], allowed: set[str], tool: str) -> dict[str, Any]:
    extra = sorted(set(args) - allowed)
    if extra:
        raise InvalidRequest(
            f"{tool}: unknown argument(s) {', '.join(extra)}; use {', '.join(sorted(allowed))}"
        )
    return {k: v for k, v in args.items() if v is not None}


async def call_people_tool(
    name: str,
    args: dict[str, Any],
    *,
    pool: asyncpg.Pool,
    publisher: Publisher,
    user_id: str,
    embedder: ModelEmbedder | None,
    embedding_dim: int,
    chat: Chat | None = None,
) -> dict[str, Any]:
    """Run ``remember`` or ``recall`` for ``user_id``; InvalidRequest for bad arguments."""
    chat_in = {"provider": chat.provider, "chat_id": chat.chat_id} if chat else None
    try:
        if name == "remember":
            body = RememberIn.model_validate({**_only(args, _REMEMBER_ARGS, name), "chat": chat_in})
            return await do_remember(
                pool,
                publisher,
                user_id,
                body,
                embedder=embedder,
                embedding_dim=embedding_dim,
                actor="tool",
            )
        if name == "recall":
            query = RecallIn.model_validate({**_only(args, _RECALL_ARGS, name), "chat": chat_in})
            return await do_recall(
                pool, user_id, query, embedder=embedder, embedding_dim=embedding_dim
            )
    except ValidationError as exc:
        raise InvalidRequest(f"invalid arguments for {name}: {_problems(exc)}") from exc
    raise InvalidRequest(f"unknown tool {name!r}; people tools: {', '.join(sorted(NAMES))}")
