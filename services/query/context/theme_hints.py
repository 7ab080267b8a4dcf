"""Nova's prompt-injection contract (3.3): tool guidance and theme hints, no content.

The block is a few lines on when to call memory.search/get/add/archive, then the
top 10 themes with their counts of active items. It aims at ≤ 1 KB and never
exceeds 2 KB: themes are dropped from the bottom until it fits (down to 5 for
the target, further only for the cap), with a note to call memory.list_themes()
whenever themes are left out. No memory item content is ever included.
When memory is off for the user or the database fails, a short "memory tools
unavailable" block replaces it; when only the hints query fails, the hints are
left out. Hints are fetched at most once per agent run (per user and day when
the caller names no run).

The guidance is written by the tools layer from the memory tool's spec
(``services.query.tools.memory.GUIDANCE``), so the signatures it shows cannot
drift from the tool; the composition root hands it in with the cache.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from services.query.context.budget import tokens
from services.query.context.command import ContextQuery
from services.query.context.models import ContextOut
from shared.db import Conn
from shared.text import one_line

log = logging.getLogger(__name__)

TARGET_BYTES = 1024
HARD_CAP_BYTES = 2048
TOP_THEMES = 10
MIN_THEMES = 5
THEME_CHARS = 48


@dataclass(frozen=True)
class Guidance:
    """When to call which memory operation: the block's fixed part, no user content."""

    instructions: str
    list_themes: str
    """The call that lists every theme (``memory.list_themes()``)."""


UNAVAILABLE = """## Memory
Memory tools are unavailable right now. Proceed without them: do not call memory tools, and do not claim to remember earlier conversations."""

MEMORY_ENABLED = """
SELECT coalesce((metadata ->> 'memory_enabled')::boolean, true) FROM users WHERE id = $1
"""

THEME_COUNTS = """
SELECT m.theme AS slug, coalesce(t.display_name, m.theme) AS name, count(*) AS active
FROM memory_items m
LEFT JOIN themes t ON t.user_id = m.user_id AND t.slug = m.theme
WHERE m.user_id = $1 AND m.status = 'active' AND m.superseded_at IS NULL
  AND (m.expires_at IS NULL OR m.expires_at > now())
GROUP BY m.theme, t.display_name
ORDER BY count(*) DESC, m.theme
LIMIT $2
"""

THEME_TOTAL = """
SELECT count(DISTINCT theme) FROM memory_items
WHERE user_id = $1 AND status = 'active' AND superseded_at IS NULL
  AND (expires_at IS NULL OR expires_at > now())
"""


@dataclass(frozen=True)
class Hints:
    themes: list[tuple[str, str, int]]  # slug, display name, active count
    total: int
    fetched_at: datetime


class HintCache:
    """Theme hints per (user, agent run), bounded, entries live at most a day; with the
    tool guidance the block opens with."""

    def __init__(
        self, guidance: Guidance, max_entries: int = 10_000, ttl_s: float = 86_400
    ) -> None:
        self.guidance = guidance
        self._items: OrderedDict[tuple[str, str], tuple[float, Hints]] = OrderedDict()
        self._max = max_entries
        self._ttl = ttl_s

    def get(self, key: tuple[str, str]) -> Hints | None:
        found = self._items.get(key)
        if found is None or time.monotonic() - found[0] > self._ttl:
            return None
        self._items.move_to_end(key)
        return found[1]

    def put(self, key: tuple[str, str], hints: Hints) -> None:
        self._items[key] = (time.monotonic(), hints)
        self._items.move_to_end(key)
        while len(self._items) > self._max:
            self._items.popitem(last=False)


def _theme_name(name: str) -> str:
    return one_line(name, THEME_CHARS)


def render(hints: Hints | None, guidance: Guidance) -> tuple[str, int]:
    """The block and how many themes it lists, within the size rules above."""
    instructions, list_themes = guidance.instructions, guidance.list_themes
    if hints is None or not hints.themes:
        return instructions, 0
    lines = [f"  - {_theme_name(name)} ({count})" for _, name, count in hints.themes]

    def build(n: int) -> str:
        parts = [instructions, f"Available memory themes (top {n}):", *lines[:n]]
        if n < hints.total:
            parts.append(f"More themes exist: call {list_themes} to see them all.")
        return "\n".join(parts)

    # Aim at the target while at least MIN_THEMES remain; never pass the hard cap.
    n = len(lines)
    while n > MIN_THEMES and len(build(n).encode()) > TARGET_BYTES:
        n -= 1
    while n > 0 and len(build(n).encode()) > HARD_CAP_BYTES:
        n -= 1
    text = build(n) if n > 0 else instructions + f"\nCall {list_themes} to see the themes."
    assert len(text.encode()) <= HARD_CAP_BYTES
    return text, n


async def _fetch_hints(conn: Conn, user_id: str) -> Hints:
    rows = await conn.fetch(THEME_COUNTS, user_id, TOP_THEMES)
    total = await conn.fetchval(THEME_TOTAL, user_id)
    return Hints(
        themes=[(r["slug"], r["name"], int(r["active"])) for r in rows],
        total=int(total or 0),
        fetched_at=datetime.now(UTC),
    )


def _unavailable(query: ContextQuery, why: str) -> ContextOut:
    return ContextOut(
        policy="tools",
        text=UNAVAILABLE,
        tokens=tokens(UNAVAILABLE),
        token_budget=query.token_budget,
        warning=why,
    )


async def assemble_tools(
    pool: asyncpg.Pool, user_id: str, query: ContextQuery, cache: HintCache
) -> ContextOut:
    run = query.agent_run_id or f"day:{datetime.now(UTC).date().isoformat()}"
    key = (user_id, run)
    hints = cache.get(key)
    cached = hints is not None
    warning = None
    try:
        async with pool.acquire() as conn:
            enabled = await conn.fetchval(MEMORY_ENABLED, user_id)
            if enabled is False:
                return _unavailable(query, "memory is disabled for this user")
            if hints is None:
                try:
                    hints = await _fetch_hints(conn, user_id)
                    cache.put(key, hints)
                except asyncpg.PostgresError as exc:
                    log.warning("theme hints failed for the tools policy: %s", exc)
                    warning = f"theme hints unavailable ({type(exc).__name__}); hints omitted"
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.warning("memory database unavailable for the tools policy: %s", exc)
        return _unavailable(query, f"memory database unavailable ({type(exc).__name__})")
    text, shown = render(hints, cache.guidance)
    themes = [{"slug": s, "name": n, "active": c} for s, n, c in (hints.themes if hints else [])]
    return ContextOut(
        policy="tools",
        text=text,
        tokens=tokens(text),
        token_budget=query.token_budget,
        truncated=max(0, (hints.total if hints else 0) - shown),
        warning=warning,
        sections={
            "themes": themes[:shown],
            "hints": [
                {
                    "cached": cached,
                    "run": run,
                    "fetched_at": hints.fetched_at.isoformat() if hints else None,
                    "bytes": len(text.encode()),
                }
            ],
        },
    )
