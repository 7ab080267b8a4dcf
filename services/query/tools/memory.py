"""The ``memory`` (Nova) and ``memory_facts`` (Navi) tools: each operation, its request
model and its handler.

The tool schemas (``services.query.tools.registry.Toolbox``) and the context's tool
guidance (``services.query.context.theme_hints``) are both built from these specs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from services.query.context.theme_hints import Guidance
from services.query.embeddings.query import lists_newest
from services.query.memory import facts as fs
from services.query.memory import items as ms
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
from services.query.memory.search import memory_search
from services.query.tools.registry import Tool, ToolContext
from services.query.tools.specs import Operation, ToolSpec, signature


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


GUIDANCE = Guidance(
    instructions="\n".join(
        [
            "## Memory",
            "You have a long-term memory tool; use it rather than guessing about the user.",
            f"- {signature(MEMORY, 'search', ['query', 'theme', 'types'])}: before answering "
            "about the user's past, preferences or plans. query='*' or an empty query returns "
            "the most recent items.",
            f"- {signature(MEMORY, 'get', ['item_id'])}: read one item in full.",
            f"- {signature(MEMORY, 'add', ['type', 'content', 'theme'])}: save durable facts, "
            "preferences and decisions the user shares.",
            f"- {signature(MEMORY, 'archive', ['item_id'])}: retire an item that is wrong or "
            "out of date.",
            "Searches return status=active items by default; status='any' includes archived ones.",
        ]
    ),
    list_themes=signature(MEMORY, "list_themes", []),
)
"""The context's tool guidance (the ``tools`` policy), its call signatures from ``MEMORY``."""


async def _search(ctx: ToolContext, body: SearchIn) -> dict[str, Any]:
    return (await memory_search(ctx.state, ctx.pool, body.params(), user_id=ctx.user_id)).as_dict()


async def _add(ctx: ToolContext, add: AddIn) -> ms.Added:
    item = ms.NewMemory(type=add.type, content=add.content, theme=add.theme, tags=tuple(add.tags))
    return await ms.add_memory(
        ctx.pool, ctx.publisher, user_id=ctx.user_id, item=item, actor="tool"
    )


async def _get(ctx: ToolContext, one: ItemIn) -> dict[str, Any]:
    return await ms.get_memory(ctx.pool, user_id=ctx.user_id, item_id=one.item_id)


async def _archive(ctx: ToolContext, one: ItemIn) -> ms.Archived:
    return await ms.archive_memory(
        ctx.pool, ctx.publisher, user_id=ctx.user_id, item_id=one.item_id, actor="tool"
    )


async def _list_themes(ctx: ToolContext, _: Nothing) -> ms.Themes:
    return await ms.list_themes(ctx.pool, user_id=ctx.user_id)


async def _save_fact(ctx: ToolContext, fact: FactIn) -> fs.SavedFact:
    return await fs.save_fact(
        ctx.pool, ctx.publisher, user_id=ctx.user_id, actor="tool", **fact.model_dump()
    )


async def _search_facts(ctx: ToolContext, q: FactSearchIn) -> fs.Facts:
    vector = None
    if not lists_newest(q.query):  # else the newest facts: nothing to embed
        vector = await ctx.state.query_vector(ctx.pool, user_id=ctx.user_id, text=q.query)
    return await fs.search_facts(
        ctx.pool,
        user_id=ctx.user_id,
        query=q.query,
        limit=q.limit,
        vector=vector,
        trigram=ctx.trigram,
    )


async def _forget_fact(ctx: ToolContext, f: ForgetIn) -> fs.Forgotten:
    return await fs.forget_fact(
        ctx.pool,
        ctx.publisher,
        user_id=ctx.user_id,
        key=f.key,
        category=f.category,
        actor="tool",
    )


async def _list_facts(ctx: ToolContext, page: FactListIn) -> fs.FactPage:
    return await fs.list_facts(ctx.pool, user_id=ctx.user_id, **page.model_dump())


MEMORY_TOOL = Tool(
    MEMORY,
    {
        "search": _search,
        "add": _add,
        "get": _get,
        "archive": _archive,
        "list_themes": _list_themes,
    },
)
FACTS_TOOL = Tool(
    FACTS,
    {"save": _save_fact, "search": _search_facts, "forget": _forget_fact, "list": _list_facts},
)
