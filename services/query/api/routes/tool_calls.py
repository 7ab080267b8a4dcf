"""Tools for LLMs: the memory tools' schemas, and one endpoint that runs a tool call.

Both read the tool table ``create_app`` put on ``app.state.tools``
(``services.query.app.TOOLBOX``), as the MCP server does.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, model_validator

from services.query.api import responses as R
from services.query.api.auth import Caller, UserId
from services.query.tools.registry import Toolbox, ToolContext, ToolError

router = APIRouter(prefix="/v1/tools", tags=["tools"])


class FunctionCall(BaseModel):
    name: str
    arguments: Any = None


class ToolCallIn(BaseModel):
    """``{name, arguments}``, an OpenAI ``tool_call`` (``{id, type, function}``) or an
    Anthropic ``tool_use`` block (``{id, type, name, input}``)."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    type: str | None = None
    name: str | None = None
    arguments: Any = None
    input: Any = None
    function: FunctionCall | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolCallIn:
        if self.function is None and not self.name:
            raise ValueError("give the tool's 'name' (or an OpenAI 'function' object)")
        return self

    def resolved(self) -> tuple[str, Any]:
        if self.function is not None:
            return self.function.name, self.function.arguments
        assert self.name is not None
        return self.name, self.input if self.input is not None else self.arguments


def toolbox(request: Request) -> Toolbox:
    """The tool table of the app serving ``request``."""
    tools: Toolbox = request.app.state.tools
    return tools


async def tool_context(request: Request, user_id: str) -> ToolContext:
    """What a tool call for ``user_id`` runs with, from the app serving ``request``
    (``/v1/tools/call`` and the MCP server)."""
    app_state = request.app.state
    pool = app_state.runtime.pool
    reads = app_state.reads
    return ToolContext(
        pool=pool,
        publisher=app_state.runtime.publisher,
        state=app_state.query,
        user_id=user_id,
        trigram=app_state.query.trigram,
        hint_cache=app_state.hint_cache,
        # tools read and write the primary; what they write, the replica reads wait for
        after=functools.partial(reads.remember, user_id) if reads.enabled else None,
    )


@router.get(
    "",
    summary="The memory tools in OpenAI and Anthropic function-calling formats",
    response_model=R.ToolSchemasOut,
    response_model_exclude_unset=True,
)
async def tools(
    request: Request,
    _who: Caller,  # a key is needed (any user's or an admin's)
    format: Annotated[Literal["all", "openai", "anthropic"], Query()] = "all",
) -> R.ToolSchemasOut:
    # only the formats asked for are set: response_model_exclude_unset leaves the others out
    return R.ToolSchemasOut(**toolbox(request).schemas(format))


@router.post(
    "/call",
    summary="Run one tool call; errors come back readable for the model",
    response_model=R.ToolCallOut,
    response_model_exclude_unset=True,
)
async def call(body: ToolCallIn, request: Request, user_id: UserId) -> R.ToolCallOut:
    name, arguments = body.resolved()
    ctx = await tool_context(request, user_id)
    # an error sets no result, a result no error: response_model_exclude_unset leaves
    # the one not set out (the response model's own instance reaches the serialiser as
    # it is, its fields set as here)
    try:
        result = await toolbox(request).call(ctx, name, arguments)
    except ToolError as exc:
        return R.ToolCallOut(
            id=body.id, name=name, is_error=True, error=str(exc), content=f"error: {exc}"
        )
    return R.ToolCallOut(
        id=body.id,
        name=name,
        is_error=False,
        result=result,
        content=json.dumps(result, default=str),
    )
