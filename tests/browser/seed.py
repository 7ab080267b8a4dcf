"""A user's memory as the other services would have stored it, written straight to the
tables the browser reads (every field the pages show, in every state)."""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg

from shared.memory.writer import NewItem, check_type, insert_items
from tests.query.helpers import unit

EMBED_ERROR = "HTTP 401: invalid api key for model text-embedding-3-small"

# Items go through the one writer, then get the state the pages must show.
SET_STATE = """
UPDATE memory_items
SET status = $2, embedding_state = $3, embedding_error = $4, embedding = $5,
    embedding_provider = $6, embedding_model = $7, embedding_dims = $8, created_at = $9
WHERE id = $1
"""


@dataclass
class Seeded:
    user_id: str
    marker: str
    items: dict[str, uuid.UUID] = field(default_factory=dict)
    person: uuid.UUID | None = None
    episode: uuid.UUID | None = None


async def seed_user(pool: asyncpg.Pool, user_id: str, marker: str) -> Seeded:
    """Memories of ``user_id`` whose every text contains ``marker``."""
    out = Seeded(user_id, marker)
    now = datetime.now(UTC)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO users (id, display_name) VALUES ($1, $2) "
            "ON CONFLICT (id) DO UPDATE SET display_name = EXCLUDED.display_name",
            user_id,
            f"{marker} Tester",
        )
        for slug, name in (("work", "Work"), ("health", "Health"), ("home", "Home")):
            await conn.execute(
                "INSERT INTO themes (user_id, slug, display_name, description) "
                "VALUES ($1, $2, $3, $4)",
                user_id,
                slug,
                name,
                f"{marker}'s {slug} notes",
            )
        out.person = await conn.fetchval(
            "INSERT INTO people (user_id, name, relation, aliases) VALUES ($1, $2, 'wife', $3) "
            "RETURNING id",
            user_id,
            f"Sarah{marker}",
            ["my wife", f"Sarah{marker}"],
        )
        out.episode = uuid.uuid4()
        summary = {
            "title": f"Planned the {marker} garden",
            "outcome": "resolved",
            "summary": f"The user and the assistant planned the {marker} vegetable garden.",
            "key_points": ["tomatoes by the south wall", "water at dawn"],
            "topics": ["garden", "planning"],
        }
        await conn.execute(
            "INSERT INTO episodes (id, user_id, display_name, provider, chat_id, status, "
            "started_at, last_active_at, closed_at, turn_count, summary, summary_text) "
            "VALUES ($1, $2, $3, 'telegram', 'chat-1', 'closed', $4, $4, $4, 12, $5, $6)",
            out.episode,
            user_id,
            f"{marker}Tag",
            now - timedelta(days=2),
            summary,
            json.dumps(summary),
        )

        async def item(
            name: str,
            theme: str,
            type_: str,
            content: str,
            *,
            age_min: int,
            state: str = "ready",
            status: str = "active",
            error: str | None = None,
            expires: datetime | None = None,
            subjects: list[uuid.UUID] | None = None,
            confidence: float | None = 0.9,
        ) -> None:
            vector = unit(zlib.crc32(content.encode())) if state == "ready" else None
            new = NewItem(
                type=check_type(type_),
                content=content,
                theme=theme,
                tags=[theme, type_],
                subjects=subjects or [],
                source="user_explicit",
                confidence=confidence,
                expires_at=expires,
                episode_id=out.episode if name == "atlas" else None,
            )
            [written] = (await insert_items(conn, user_id, [new], actor="seed")).items
            out.items[name] = written.id
            await conn.execute(
                SET_STATE,
                written.id,
                status,
                state,
                error,
                vector,
                "openai" if state != "pending" else None,
                "text-embedding-3-small" if state != "pending" else None,
                384 if state == "ready" else None,
                now - timedelta(minutes=age_min),
            )

        await item("atlas", "work", "fact", f"Project {marker} Atlas ships in May", age_min=1)
        await item("pg", "work", "decision", f"Decided {marker} to use PostgreSQL", age_min=2)
        await item(
            "runs",
            "health",
            "preference",
            f"{marker} prefers morning runs",
            age_min=3,
            state="pending",
        )
        await item(
            "night",
            "health",
            "preference",
            f"{marker} used to run at night",
            age_min=4,
            status="archived",
        )
        await item(
            "broken",
            "work",
            "fact",
            f"{marker} badge number is 4411",
            age_min=5,
            state="error",
            error=EMBED_ERROR,
        )
        await item("bergen", "home", "fact", f"{marker} lives in Bergen", age_min=6)
        await item("oslo", "home", "fact", f"{marker} lives in Oslo", age_min=7)
        await item(
            "expired",
            "home",
            "instruction",
            f"{marker} asks for a reminder today",
            age_min=8,
            expires=now - timedelta(hours=1),
        )
        await item(
            "sarah",
            "home",
            "fact",
            f"Sarah{marker} is allergic to peanuts",
            age_min=9,
            subjects=[out.person],
        )
        await conn.execute(
            "UPDATE memory_items SET superseded_at = now(), superseded_by = $2 WHERE id = $1",
            out.items["oslo"],
            out.items["bergen"],
        )
        for content, conf in (
            (f"{marker} may own a sailboat", 0.35),
            (f"{marker} might be vegetarian", 0.4),
        ):
            await conn.execute(
                "INSERT INTO fact_reviews (user_id, episode_id, subject, content, category, "
                "confidence, source, source_context, reason) "
                "VALUES ($1, $2, 'user', $3, 'preference', $4, 'conversation', $5, "
                "'confidence below threshold')",
                user_id,
                out.episode,
                content,
                conf,
                f"I think {content.lower()}",
            )
        await conn.execute(
            "INSERT INTO user_summaries (user_id, summary, fact_count) VALUES ($1, $2, 7)",
            user_id,
            f"{marker} Tester lives in Bergen and works on Project {marker} Atlas.",
        )
    return out
