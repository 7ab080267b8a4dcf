"""Jarvus's prompt construction (6.1-6.2): facts and preferences, recent episodes,
available procedures, each under its own heading, cut to the token budget."""

from __future__ import annotations

from typing import Any

import asyncpg

from services.query.context.budget import Block, fit_blocks
from services.query.context.command import ContextQuery
from services.query.context.models import ContextOut
from services.query.embeddings.query import QueryVector
from services.query.ranking.fusion import CONTEXT_MEMORIES
from services.query.ranking.recall import MemoryHit, is_member, search_memories
from shared.text import one_line

FACT_TYPES = ["fact", "preference", "instruction", "decision"]
PROCEDURE_TYPES = ["procedure", "workflow"]
LIMIT = 5

RECENT_EPISODES = """
(SELECT 'memory' AS kind, id::text AS id, content, data, created_at AS at
 FROM memory_items
 WHERE user_id = $1 AND type = 'episode' AND status = 'active' AND superseded_at IS NULL
   AND (expires_at IS NULL OR expires_at > now())
 ORDER BY created_at DESC LIMIT $2)
UNION ALL
(SELECT 'session', id::text, summary_text, '{}'::jsonb, coalesce(closed_at, last_active_at)
 FROM episodes
 WHERE user_id = $1 AND summary_text IS NOT NULL AND summary_text <> ''
 ORDER BY last_active_at DESC LIMIT $2)
ORDER BY at DESC
LIMIT $2
"""


# The user's own keyed facts (Navi's ``facts.save(category, key, value)``), newest
# first: a value such as "Bergen" alone shares no word and little meaning with "where
# do I live?", so the search above does not find it; the profile is short and is
# what this section is for (issue 29.15).
KEYED_FACTS = """
SELECT id, category, key, content FROM memory_items
WHERE user_id = $1 AND category IS NOT NULL AND key IS NOT NULL AND status = 'active'
  AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > now())
ORDER BY updated_at DESC, id
LIMIT $2
"""
KEYED_LIMIT = 10
LINE_CHARS = 400


def keyed_line(category: str, key: str, value: str) -> str:
    """``location / home city: Bergen``."""
    label = key.replace("_", " ")
    return f"- {_line(f'{category} / {label}: {value}')}"


def _line(text: str) -> str:
    return one_line(text, LINE_CHARS)


def fact_line(hit: MemoryHit) -> str:
    return f"- {_line(str(hit.data.get('text') or hit.content))}"


def episode_line(content: str, data: dict[str, Any]) -> str:
    kind = data.get("type")
    if kind == "chrome_action":
        return (
            f"- Chrome: {data.get('action')} {data.get('target')} on {data.get('url')} "
            f"({data.get('result')})"
        )
    if kind == "feedback":
        return f"- Feedback: {data.get('user_response')} ({data.get('notes', '')})"
    if kind == "workflow_execution":
        return f"- Workflow: {data.get('workflow_id')} result: {data.get('result')}"
    return f"- {_line(content)}"


def procedure_line(hit: MemoryHit) -> str:
    desc = str(hit.data.get("description") or hit.content)
    steps = hit.data.get("steps")
    n = len(steps) if isinstance(steps, list) else None
    return f"- {_line(desc)}" + (f" (steps: {n})" if n is not None else "")


async def assemble_sections(
    pool: asyncpg.Pool, user_id: str, query: ContextQuery, qv: QueryVector
) -> ContextOut:
    chat = query.chat
    async with pool.acquire() as conn:
        member = await is_member(conn, user_id, chat) if chat else False
        facts = await search_memories(
            conn,
            user_id,
            query=query.message,
            vector=qv.vector,
            model=qv.model,
            chat=chat,
            member=member,
            types=FACT_TYPES,
            limit=LIMIT,
            spec=CONTEXT_MEMORIES,
        )
        procedures = await search_memories(
            conn,
            user_id,
            query=query.message,
            vector=qv.vector,
            model=qv.model,
            chat=chat,
            member=member,
            types=PROCEDURE_TYPES,
            limit=LIMIT,
            spec=CONTEXT_MEMORIES,
        )
        episodes = await conn.fetch(RECENT_EPISODES, user_id, LIMIT)
        keyed = await conn.fetch(KEYED_FACTS, user_id, KEYED_LIMIT)
    # the facts found for the message, then the rest of the profile; a keyed fact
    # says its category and key ("location / home city: Bergen", not "Bergen")
    labels = {r["id"]: keyed_line(r["category"], r["key"], r["content"]) for r in keyed}
    found = {h.id for h in facts}
    fact_rows = [(str(h.id), h.type, h.content, labels.get(h.id) or fact_line(h)) for h in facts]
    fact_rows += [
        (str(r["id"]), "fact", r["content"], labels[r["id"]]) for r in keyed if r["id"] not in found
    ]
    # Jarvus's own episodes (actions, feedback, workflow runs) and conversation
    # sessions' summaries, each under a heading that says what it is
    actions = [i for i, r in enumerate(episodes) if r["kind"] == "memory"]
    sessions = [i for i, r in enumerate(episodes) if r["kind"] == "session"]
    fitted = fit_blocks(
        [
            Block("facts", "User Preferences and Facts:", [row[3] for row in fact_rows]),
            Block(
                "episodes",
                "Recent User Actions and Feedback:",
                [
                    episode_line(episodes[i]["content"], dict(episodes[i]["data"] or {}))
                    for i in actions
                ],
            ),
            Block(
                "sessions",
                "Recent Conversations:",
                [episode_line(episodes[i]["content"], {}) for i in sessions],
            ),
            Block(
                "procedures",
                "Available Workflows/Procedures:",
                [procedure_line(h) for h in procedures],
            ),
        ],
        query.token_budget,
    )
    return ContextOut(
        policy="sections",
        text=fitted.text,
        tokens=fitted.tokens,
        token_budget=query.token_budget,
        truncated=fitted.dropped,
        retrieval=qv.retrieval,
        warning=qv.warning,
        sections={
            "facts": [
                {"id": fact_rows[i][0], "type": fact_rows[i][1], "content": fact_rows[i][2]}
                for i in fitted.kept["facts"]
            ],
            "episodes": [
                {
                    "kind": episodes[i]["kind"],
                    "id": episodes[i]["id"],
                    "content": episodes[i]["content"],
                    "at": episodes[i]["at"].isoformat(),
                }
                for i in sorted(
                    [actions[k] for k in fitted.kept["episodes"]]
                    + [sessions[k] for k in fitted.kept["sessions"]]
                )
            ],
            "procedures": [
                {
                    "id": str(procedures[i].id),
                    "content": procedures[i].content,
                    "data": procedures[i].data,
                }
                for i in fitted.kept["procedures"]
            ],
        },
    )
