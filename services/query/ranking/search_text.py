"""What a search text may be, and what a blank one means: one rule for every search.

Every search of the agent API (``/v1/memory/search``, ``/v1/facts/search``,
``/v1/messages/search``, ``/v1/episodes/search``, ``/v1/recall``,
``/v1/store/search``, the Jarvus reads, admin search), the tools that call them
(HTTP tool call, MCP) and the memory browser's search box take their text
through :data:`SearchText` (or :data:`OptionalSearchText` where it may be left
out) and decide with :func:`lists_newest`:

- a text that is empty, only whitespace, or ``*`` asks for no match: the newest
  rows first (a listing, under the call's other filters); nothing is embedded;
- a text longer than :data:`MAX_SEARCH_CHARS` is refused (422 naming the field,
  never echoing its value; a tool error for a tool call).

The context's ``message`` follows the same rule: a blank message has nothing to
match, so nothing is embedded, no past turn is shown and the memories are the
newest. The facts listing's ``search`` filter (``GET /v1/facts``) too: blank is
no filter.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_SEARCH_CHARS = 2_000

NEWEST = "empty, blank or '*' = the newest first"
"""How the rule reads in a field's description (and so in the tool schemas)."""


def lists_newest(text: str | None) -> bool:
    """Whether ``text`` asks for the newest rows rather than for matches."""
    return text is None or text.strip() in ("", "*")


def described(what: str) -> str:
    """A search field's description: what it finds, then the rule for a blank one."""
    return f"{what}; {NEWEST}"


SearchText = Annotated[
    str, Field(max_length=MAX_SEARCH_CHARS, description=described("what to find"))
]
OptionalSearchText = Annotated[
    str | None, Field(max_length=MAX_SEARCH_CHARS, description=described("what to find"))
]
