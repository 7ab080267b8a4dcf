"""The tool table's parts: a tool is its spec and one handler per request model.

A :class:`Tool` pairs a :class:`~services.query.tools.specs.ToolSpec` (the
schema the model sees, generated from the request models) with a handler for
each request model: one for a single-model tool (``remember``), one per
operation for a selector tool (``memory``'s ``operation``). Every call goes
through :func:`run`: the arguments are parsed (OpenAI sends a JSON string),
checked by the one validator :func:`validate` against the model of the tool or
operation, and handed to its handler as that model. A :class:`Toolbox` is a
table of them with its listing (OpenAI and Anthropic formats) and its dispatch.
The table itself (which tools exist) is ``services.query.app.TOOLBOX``;
``create_app`` puts it on ``app.state.tools``, where the HTTP tool call, MCP and
the tool listing read it (none of them imports the tool modules).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pydantic import BaseModel, TypeAdapter, ValidationError

from services.query.context.theme_hints import HintCache
from services.query.embeddings.query import user_embedder
from services.query.memory.state import QueryState
from services.query.tools.specs import ToolSpec, anthropic, neutral, openai
from shared.errors import InvalidRequest, NotFound
from shared.memory.vectors import ModelEmbedder
from shared.memory.writer import Chat
from shared.storable import MAX_JSON_DEPTH, find_problem
from shared.streams import Publisher


class ToolError(Exception):
    """A tool call that failed in a way the model can read and correct."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool call runs with: the process's parts and the user it acts for."""

    pool: asyncpg.Pool
    publisher: Publisher
    state: QueryState
    user_id: str
    trigram: bool
    hint_cache: HintCache
    chat: Chat | None = None
    """The chat the call happens in (the agent's session), never the model's to choose."""
    after: Callable[[], Awaitable[None]] | None = None
    """Run after every call, failed or not (read-your-writes keeps the user's write
    position: services/query/api/replica.py)."""

    async def embedder(self) -> ModelEmbedder | None:
        """The user's query embedder (None: none configured)."""
        return await user_embedder(
            self.state.resolver, self.pool, user_id=self.user_id, settings=self.state.settings
        )


Handler = Callable[[ToolContext, Any], Awaitable[Any]]
"""Runs one validated request (an instance of the tool's or operation's model)."""


@dataclass(frozen=True)
class Tool:
    """One row of the table: the spec, and a handler per request model (the key is
    the operation's name, or None for a single-model tool)."""

    spec: ToolSpec
    handlers: Mapping[str | None, Handler]
    context_args: Callable[[ToolContext], Mapping[str, Any]] | None = None
    """Arguments the call's context sets, never the model (``remember``'s chat)."""
    only: Collection[str] | None = field(default=None)
    """Arguments the model may give (default: the spec's ``only``, else all)."""

    def __post_init__(self) -> None:
        names = {o.name for o in self.spec.operations} if self.spec.selector else {None}
        if set(self.handlers) != names:
            raise ValueError(f"tool {self.spec.name}: handlers {set(self.handlers)} != {names}")

    @property
    def name(self) -> str:
        return self.spec.name


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


def validate(
    model: type[BaseModel],
    args: Mapping[str, Any],
    *,
    name: str,
    only: Collection[str] | None = None,
    context_args: Mapping[str, Any] | None = None,
    operation: bool = False,
) -> Any:
    """The one argument validator: ``args`` as ``model``, or InvalidRequest naming each
    problem (at most ten) for the model to correct. ``None`` values count as absent;
    with ``only``, an argument outside it is refused by name; ``context_args`` are set
    by the call's context after the check."""
    if only is not None:
        extra = sorted(set(args) - set(only))
        if extra:
            raise InvalidRequest(
                f"{name}: unknown argument(s) {', '.join(extra)}; use {', '.join(sorted(only))}"
            )
    given = {k: v for k, v in args.items() if v is not None}
    try:
        return model.model_validate({**given, **(context_args or {})})
    except ValidationError as exc:
        unknown = "not allowed for this operation" if operation else "unknown argument"
        problems = []
        for err in exc.errors()[:10]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
            msg = unknown if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{loc}: {msg}")
        raise InvalidRequest(f"invalid arguments for {name}: " + "; ".join(problems)) from exc


def render(result: Any) -> Any:
    """A handler's result as JSON-ready data: a typed result (dataclass or pydantic
    model) is rendered here, once, for the HTTP tool call and MCP alike."""
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return TypeAdapter(type(result)).dump_python(result, mode="json")
    return result


def _choices(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


async def run(table: Mapping[str, Tool], ctx: ToolContext, name: str, arguments: Any) -> Any:
    """Validate and run one call of the tool ``name`` for ``ctx.user_id``. ToolError
    (readable by the model) for an unknown tool or operation, bad arguments, an
    unknown item."""
    args = parse_arguments(arguments)
    tool = table.get(name)
    if tool is None:
        raise ToolError(f"unknown tool {name!r}; available tools: {', '.join(table)}")
    spec = tool.spec
    try:
        if spec.selector is not None:
            op_name = args.pop(spec.selector, None)
            op = spec.operation(op_name)
            if op is None:
                names = [o.name for o in spec.operations]
                raise ToolError(f"unknown {spec.selector} {op_name!r}; use {_choices(names)}")
            body = validate(op.model, args, name=op.name, operation=True)
            return render(await tool.handlers[op.name](ctx, body))
        assert spec.model is not None
        only = tool.only if tool.only is not None else spec.only
        fixed = tool.context_args(ctx) if tool.context_args else None
        body = validate(spec.model, args, name=name, only=only, context_args=fixed)
        return render(await tool.handlers[None](ctx, body))
    except (InvalidRequest, NotFound) as exc:
        raise ToolError(str(exc)) from exc


class Toolbox:
    """A table of tools (name -> :class:`Tool`), listed and dispatched: what
    ``GET /v1/tools``, ``POST /v1/tools/call`` and MCP serve."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.table: dict[str, Tool] = {t.name: t for t in tools}
        if len(self.table) != len(tools):
            raise ValueError("two tools share a name")
        self.tools: list[dict[str, Any]] = [neutral(t.spec) for t in self.table.values()]
        """The tools as ``{name, description, parameters}``, built from the request models."""

    def schemas(self, fmt: str = "all") -> dict[str, list[dict[str, Any]]]:
        """The tools in OpenAI and/or Anthropic format."""
        out: dict[str, list[dict[str, Any]]] = {}
        if fmt in ("all", "openai"):
            out["openai"] = [openai(t) for t in self.tools]
        if fmt in ("all", "anthropic"):
            out["anthropic"] = [anthropic(t) for t in self.tools]
        return out

    async def call(self, ctx: ToolContext, name: str, arguments: Any) -> Any:
        """Run one call of ``name`` for ``ctx.user_id``; ToolError for the model to read."""
        try:
            return await run(self.table, ctx, name, arguments)
        finally:
            if ctx.after is not None:
                await ctx.after()
