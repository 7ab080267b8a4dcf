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
from services.query.context.tools import HintCache
from services.query.context_tools import CONTEXT_TOOLS, call_context_tool
from services.query.context_tools import NAMES as CONTEXT_TOOL_NAMES
from services.query.embedding import user_embedder
from services.query.people_tools import NAMES as PEOPLE_TOOL_NAMES
from services.query.people_tools import PEOPLE_TOOLS, call_people_tool
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
from shared.errors import InvalidRequest, NotFound
from shared.streams import Publisher

TYPES = list(ms.MEMORY_TYPES)

MEMORY_TOOL: dict[str, Any] = {
    "name": "memory",
    "description": (
        "Long-term memory about the user. operation=search finds memories (hybrid "
        "semantic + keyword; query '*' or empty returns the newest; archived items "
        "only with status 'archived' or 'any'). operation=add stores one memory "
        "(type, content, optional theme, tags). operation=get returns one item by id. "
        "operation=archive hides an outdated or wrong item (add a corrected one first). "
        "operation=list_themes lists the themes in use."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "operation": {
                "type": "string",
                "enum": ["search", "add", "get", "archive", "list_themes"],
            },
            "query": {"type": "string", "description": "search: words to find; '*' = newest"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "description": "search: results (default 10, max 50)",
            },
            "theme": {
                "type": "string",
                "description": "search: only this theme; add: theme slug (default 'general')",
            },
            "types": {
                "type": "array",
                "items": {"type": "string", "enum": TYPES},
                "description": "search: only these types",
            },
            "recency_days": {
                "type": "integer",
                "minimum": 1,
                "description": "search: only items newer than this many days",
            },
            "status": {
                "type": "string",
                "enum": ["active", "archived", "any"],
                "description": "search: default active",
            },
            "type": {"type": "string", "enum": TYPES, "description": "add: kind of memory"},
            "content": {"type": "string", "description": "add: the memory, one statement"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "add: tags"},
            "item_id": {"type": "string", "description": "get/archive: the memory's id"},
        },
        "required": ["operation"],
    },
}

FACTS_TOOL: dict[str, Any] = {
    "name": "memory_facts",
    "description": (
        "Stable facts about the user, one value per (category, key). action=save upserts "
        "a fact; action=search finds facts by meaning or keyword; action=forget deletes "
        "a fact by key (only when the user asks or it is clearly wrong); action=list "
        "returns stored facts. Confidence 0-100: tool output 95, user statement 80, "
        "web 50, guess 30."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["save", "search", "forget", "list"]},
            "category": {"type": "string", "description": "save/forget: e.g. location, work"},
            "key": {"type": "string", "description": "save/forget: e.g. home_city"},
            "value": {"type": "string", "description": "save: the fact's value"},
            "source": {
                "type": "string",
                "enum": ["conversation", "tool_call", "auto_discovery", "user_explicit"],
            },
            "confidence": {"type": "number", "minimum": 0, "maximum": 100},
            "expires_days": {
                "type": "integer",
                "minimum": 1,
                "description": "save: forget after this many days",
            },
            "source_context": {"type": "string", "description": "save: where it was learned"},
            "query": {"type": "string", "description": "search: what to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        "required": ["action"],
    },
}

TOOLS = [MEMORY_TOOL, FACTS_TOOL, *PEOPLE_TOOLS, *CONTEXT_TOOLS]


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
    openai = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["parameters"],
            },
        }
        for t in TOOLS
    ]
    anthropic = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in TOOLS
    ]
    if fmt == "openai":
        return {"openai": openai}
    if fmt == "anthropic":
        return {"anthropic": anthropic}
    return {"openai": openai, "anthropic": anthropic}


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Arguments as a dict; OpenAI sends them as a JSON string."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolError(
                f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"
            ) from exc
    if not isinstance(arguments, dict):
        raise ToolError("arguments must be a JSON object")
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
        _validate(_Nothing, args, op)
        return {"themes": await ms.list_themes(ctx.pool, user_id=ctx.user_id)}
    raise ToolError(f"unknown operation {op!r}; use search, add, get, archive or list_themes")


async def _facts(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    action = args.pop("action", None)
    if action == "save":
        fact: FactIn = _validate(FactIn, args, action)
        return await fs.save_fact(
            ctx.pool, ctx.publisher, user_id=ctx.user_id, fact=fact, actor="tool"
        )
    if action == "search":
        q: FactSearchIn = _validate(FactSearchIn, args, action)
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
        return await fs.list_facts(ctx.pool, user_id=ctx.user_id, query=page)
    raise ToolError(f"unknown action {action!r}; use save, search, forget or list")


class _Nothing(BaseModel):
    model_config = {"extra": "forbid"}
