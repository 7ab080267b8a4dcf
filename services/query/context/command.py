"""The context use case's command: what it is asked, free of the HTTP request model.

``POST /v1/context`` and the ``context`` tool map their :class:`ContextIn` to it
(``ContextIn.command()``); benches and tests build it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shared.memory.writer import Chat

Policy = Literal["auto", "tools", "summary", "sections"]


@dataclass(frozen=True)
class ContextQuery:
    """The user's message, the chat it is in, the policy, the token budget, and
    (tools policy) the agent run its theme hints are cached for."""

    message: str = ""
    chat: Chat | None = None
    policy: Policy = "auto"
    token_budget: int = 2_000
    agent_run_id: str | None = None
    as_of: datetime | None = None
    """auto policy: read as of this time (memories valid then, turns before it)."""
