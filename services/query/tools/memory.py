"""The ``memory`` (Nova) and ``memory_facts`` (Navi) tools: each operation and its request model.

The tool schemas (``services.query.tools.toolbox``) and the context's tool guidance
(``services.query.context.theme_hints``) are both built from these specs.
"""

from __future__ import annotations

from pydantic import BaseModel

from services.query.memory.requests import (
    CONFIDENCE_TEXT,
    AddIn,
    FactIn,
    FactListIn,
    FactSearchIn,
    ForgetIn,
    ItemIn,
    SearchIn,
)
from services.query.tools.specs import Operation, ToolSpec


class Nothing(BaseModel):
    """An operation without arguments."""

    model_config = {"extra": "forbid"}


MEMORY = ToolSpec(
    name="memory",
    description="Long-term memory about the user.",
    selector="operation",
    operations=(
        Operation(
            "search",
            SearchIn,
            "finds memories (hybrid semantic + keyword; query '*' or empty returns the "
            "newest; archived items only with status 'archived' or 'any').",
        ),
        Operation("add", AddIn, "stores one memory (type, content, optional theme, tags)."),
        Operation("get", ItemIn, "returns one item by id."),
        Operation(
            "archive", ItemIn, "hides an outdated or wrong item (add a corrected one first)."
        ),
        Operation("list_themes", Nothing, "lists the themes in use."),
    ),
)

FACTS = ToolSpec(
    name="memory_facts",
    description="Stable facts about the user, one value per (category, key).",
    selector="action",
    operations=(
        Operation("save", FactIn, "upserts a fact; " + CONFIDENCE_TEXT + "."),
        Operation("search", FactSearchIn, "finds facts by meaning or keyword."),
        Operation(
            "forget",
            ForgetIn,
            "deletes a fact by key (only when the user asks or it is clearly wrong).",
        ),
        Operation("list", FactListIn, "returns stored facts."),
    ),
)
