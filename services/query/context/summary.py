"""Navi's injection: "## What I remember about the user" and the narrative summary.

Nothing is injected when the user has no summary yet. A summary longer than the
token budget is cut at a sentence (else word) boundary and counted as truncated.
"""

from __future__ import annotations

import asyncpg

from services.query.context.budget import tokens
from services.query.context.command import ContextQuery
from services.query.context.models import ContextOut

HEADER = "## What I remember about the user\n\n"

SUMMARY = "SELECT summary, fact_count, updated_at FROM user_summaries WHERE user_id = $1"


def cut(text: str, max_tokens: int) -> str:
    """``text`` within ``max_tokens``, ending at a sentence or word boundary."""
    if tokens(text) <= max_tokens:
        return text
    room = max(0, max_tokens * 4 - 1)
    head = text[:room]
    for stop in (". ", "\n"):
        i = head.rfind(stop)
        if i > room // 2:
            return head[: i + 1].rstrip()
    i = head.rfind(" ")
    return (head[:i] if i > 0 else head).rstrip() + "…"


async def assemble_summary(pool: asyncpg.Pool, user_id: str, query: ContextQuery) -> ContextOut:
    row = await pool.fetchrow(SUMMARY, user_id)
    if row is None or not row["summary"].strip():
        return ContextOut(policy="summary", text="", tokens=0, token_budget=query.token_budget)
    summary: str = row["summary"].strip()
    room = query.token_budget - tokens(HEADER)
    fitted = cut(summary, room) if room > 0 else ""
    text = HEADER + fitted if fitted else ""
    return ContextOut(
        policy="summary",
        text=text,
        tokens=tokens(text),
        token_budget=query.token_budget,
        truncated=0 if fitted == summary else 1,
        sections={
            "summary": [
                {
                    "summary": summary,
                    "fact_count": row["fact_count"],
                    "updated_at": row["updated_at"].isoformat(),
                }
            ]
        },
    )
