"""The context request (HTTP and tool) and answer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.query.context.command import ContextQuery, Policy
from services.query.people.chat import ChatIn
from shared.dates import AS_OF_TEXT, AsOf


class ContextIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: Annotated[str, Field(max_length=20_000)] = Field(
        default="",
        description="the user's message the context is for; blank or '*': nothing to "
        "match (no past turns, the newest memories)",
    )
    chat: ChatIn | None = Field(default=None, description="the chat the message is in")
    policy: Policy = Field(
        default="auto",
        description="auto (Ash: relevant messages, memories, known people), tools (Nova: "
        "tool instructions and theme hints, no memory content), summary (Navi: the narrative "
        "summary), sections (Jarvus: facts, recent episodes, procedures)",
    )
    token_budget: Annotated[int, Field(ge=50, le=100_000)] = 2_000
    agent_run_id: Annotated[str, Field(max_length=200)] | None = Field(
        default=None,
        description="tools policy: theme hints are refreshed once per agent run "
        "(once per day without one)",
    )
    as_of: AsOf | None = Field(default=None, description="auto policy: " + AS_OF_TEXT)

    def command(self) -> ContextQuery:
        return ContextQuery(
            message=self.message,
            chat=self.chat.chat() if self.chat else None,
            policy=self.policy,
            token_budget=self.token_budget,
            agent_run_id=self.agent_run_id,
            as_of=self.as_of,
        )


class ContextOut(BaseModel):
    policy: Policy
    text: str = Field(description="the block to put in the system prompt ('' = nothing)")
    tokens: int = Field(description="estimated tokens of text (4 characters per token)")
    token_budget: int
    truncated: int = Field(default=0, description="items left out to fit the budget")
    sections: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="the items behind the text, by section"
    )
    retrieval: Literal["hybrid", "full_text", "none"] = "none"
    warning: str | None = Field(
        default=None,
        description="set when context is degraded (embedding provider down: "
        "full-text search only; memory unavailable)",
    )
