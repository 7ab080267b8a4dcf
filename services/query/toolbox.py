"""The memory tools as LLM function-calling schemas, and their executor.

Tools: ``memory`` (Nova 3.2: search, add, get, archive, list_themes),
``memory_facts`` (Navi: save, search, forget, list), ``remember`` and ``recall``
(Ash), ``context`` and ``episode_recall``. :func:`tool_schemas` gives
them in OpenAI and Anthropic formats; :func:`call_tool` runs one call for one
user and returns its JSON result, or raises :class:`ToolError` with a message
written for the model (bad arguments, unknown item, unknown tool).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg
from pydantic import BaseModel, ValidationError

from services.query import facts_service as fs
from services.query import memory_service as ms
from services.query.context.theme_hints import HintCache
from services.query.context_tool_calls import CONTEXT_SPECS, call_context_tool
from services.query.context_tool_calls import NAMES as CONTEXT_TOOL_NAMES
from services.query.embedding import user_embedder
from services.query.memory_tool_specs import FACTS, MEMORY, Nothing
from services.query.people_tool_calls import NAMES as PEOPLE_TOOL_NAMES
from services.query.people_tool_calls import PEOPLE_SPECS, call_people_tool
from services.query.schemas import (
    AddIn,
    FactIn,
    FactListIn,
    FactSearchIn,
    ForgetIn,
    ItemIn,
    SearchIn,
)
from services.query.state import QueryState
from services.query.tool_specs import anthropic, neutral, openai
from shared.errors import InvalidRequest, NotFound
from shared.storable import MAX_JSON_DEPTH, find_problem
from shared.streams import Publisher

SPECS = [MEMORY, FACTS, *PEOPLE_SPECS, *CONTEXT_SPECS]
TOOLS = [neutral(s) for s in SPECS]


class ToolError(Exception):
    """A tool call that failed in a way the model can read and correct."""


@dataclass(frozen=True)
class ToolContext:
    pool: asyncpg.Pool
    publisher: Publisher
    state: QueryState
    user_id: str
    trigram: bool
    hint_cache: HintCache


def tool_schemas(fmt: str = "all") -> dict[str, list[dict[str, Any]]]:
    """The tools in OpenAI and/or Anthropic format, built from the request models."""
    out: dict[str, list[dict[str, Any]]] = {}
    if fmt in ("all", "openai"):
        out["openai"] = [openai(t) for t in TOOLS]
    if fmt in ("all", "anthropic"):
        out["anthropic"] = [anthropic(t) for t in TOOLS]
    return out


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Arguments as a dict; OpenAI sends them as a JSON string. Either way they pass
    the one storable check (``shared.storable``): no NUL, no lone surrogate, no
    64-bit overflow, no nesting past its bound, named in the error."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError(
                f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"
            ) from exc
        except RecursionError:
            raise ToolError(f"arguments are nested deeper than {MAX_JSON_DEPTH} levels") from None
    if not isinstance(arguments, dict):
        raise ToolError("arguments must be a JSON object")
    found = find_problem(arguments, ("arguments",))
    if found is not None:
        where, problem = found
        raise ToolError(f"{'.'.join(str(p) for p in where)} {problem}")
    return arguments


def _validate(model: type[BaseModel], args: dict[str, Any], op: str) -> Any:
    given = {k: v for k, v in args.items() if v is not None}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:10]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
            msg = (
                "not allowed for this operation" if err["type"] == "extra_forbidden" else err["msg"]
            )
            problems.append(f"{loc}: {msg}")
        raise ToolError(f"invalid arguments for {op}: " + "; ".join(problems)) from exc


async def call_tool(ctx: ToolContext, name: str, arguments: Any) -> dict[str, Any]:
    args = parse_arguments(arguments)
    try:
        if name == "memory":
            return await _memory(ctx, args)
        if name == "memory_facts":
            return await _facts(ctx, args)
        if name in PEOPLE_TOOL_NAMES or name in CONTEXT_TOOL_NAMES:
            embedder = await user_embedder(
                ctx.state.resolver, ctx.pool, user_id=ctx.user_id, settings=ctx.state.settings
            )
            if name in CONTEXT_TOOL_NAMES:
                return await call_context_tool(
                    name,
                    args,
                    pool=ctx.pool,
                    state=ctx.state,
                    user_id=ctx.user_id,
                    embedder=embedder,
                    hint_cache=ctx.hint_cache,
                )
            return await call_people_tool(
                name,
                args,
                pool=ctx.pool,
                publisher=ctx.publisher,
                user_id=ctx.user_id,
                embedder=embedder,
                embedding_dim=ctx.state.settings.embedding_dim,
            )
    except (InvalidRequest, NotFound) as exc:
        raise ToolError(str(exc)) from exc
    known = ", ".join(t["name"] for t in TOOLS)
    raise ToolError(f"unknown tool {name!r}; available tools: {known}")


async def _memory(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    op = args.pop("operation", None)
    if op == "search":
        body: SearchIn = _validate(SearchIn, args, op)
        return (await ctx.state.search(ctx.pool, body.params(), user_id=ctx.user_id)).as_dict()
    if op == "add":
        add: AddIn = _validate(AddIn, args, op)
        item = ms.NewMemory(
            type=add.type, content=add.content, theme=add.theme, tags=tuple(add.tags)
        )
        added = await ms.add_memory(
            ctx.pool, ctx.publisher, user_id=ctx.user_id, item=item, actor="tool"
        )
        return added.as_dict()
    if op == "get":
        one: ItemIn = _validate(ItemIn, args, op)
        return await ms.get_memory(ctx.pool, user_id=ctx.user_id, item_id=one.item_id)
    if op == "archive":
        one = _validate(ItemIn, args, op)
        return await ms.archive_memory(
            ctx.pool, ctx.publisher, user_id=ctx.user_id, item_id=one.item_id, actor="tool"
        )
    if op == "list_themes":
        _validate(Nothing, args, op)
        return {"themes": await ms.list_themes(ctx.pool, user_id=ctx.user_id)}
    raise ToolError(f"unknown operation {op!r}; use search, add, get, archive or list_themes")


async def _facts(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    action = args.pop("action", None)
    if action == "save":
        fact: FactIn = _validate(FactIn, args, action)
        return await fs.save_fact(
            ctx.pool, ctx.publisher, user_id=ctx.user_id, actor="tool", **fact.model_dump()
        )
    if action == "search":
        q: FactSearchIn = _validate(FactSearchIn, args, action)
        vector = None
        if q.query.strip() not in ("", "*"):  # else the newest facts: nothing to embed
            vector = await ctx.state.query_vector(ctx.pool, user_id=ctx.user_id, text=q.query)
        return {
            "facts": await fs.search_facts(
                ctx.pool,
                user_id=ctx.user_id,
                query=q.query,
                limit=q.limit,
                vector=vector,
                trigram=ctx.trigram,
            )
        }
    if action == "forget":
        f: ForgetIn = _validate(ForgetIn, args, action)
        return await fs.forget_fact(
            ctx.pool,
            ctx.publisher,
            user_id=ctx.user_id,
            key=f.key,
            category=f.category,
            actor="tool",
        )
    if action == "list":
        page: FactListIn = _validate(FactListIn, args, action)
        return await fs.list_facts(ctx.pool, user_id=ctx.user_id, **page.model_dump())
    raise ToolError(f"unknown action {action!r}; use save, search, forget or list")
