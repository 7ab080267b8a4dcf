"""Episode recall: summary, key points and topics; user filter; current-user boost; user tag."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from services.extractor.service import summary_text
from services.query.episodes.recall import recall_episodes
from shared.llm.schemas import EpisodeSummary
from tests.extractor.helpers import T0


async def _episode(pool: asyncpg.Pool, user_id: str, name: str, **summary: Any) -> uuid.UUID:
    await pool.execute(
        "INSERT INTO users (id, display_name) VALUES ($1, $2) ON CONFLICT DO NOTHING", user_id, name
    )
    s = EpisodeSummary.model_validate({"summary": "A conversation.", **summary})
    return await pool.fetchval(
        """INSERT INTO episodes (id, user_id, display_name, provider, chat_id, status,
                                 started_at, last_active_at, summary, summary_text)
           VALUES (gen_random_uuid(), $1, $2, 'test', 'c', 'closed', $3, $3, $4, $5)
           RETURNING id""",
        user_id,
        name,
        T0,
        s.model_dump(),
        summary_text(s),
    )


async def test_recall_matches_topics_and_key_points_and_tags_the_user(
    pool: asyncpg.Pool, user_id: str
) -> None:
    other = f"emerson-{uuid.uuid4().hex[:8]}"
    mine = await _episode(
        pool,
        user_id,
        "Tim",
        title="Checked weather for Silver Spring, MD",
        topics=["weather"],
        key_points=["Sunny, 22 degrees"],
    )
    await _episode(
        pool,
        user_id,
        "Tim",
        title="Planned a birthday party",
        key_points=["Ordered a chocolate cake"],
        topics=["party"],
    )
    theirs = await _episode(pool, other, "Emerson", title="Weather in Boston", topics=["weather"])

    hits = await recall_episodes(
        pool, query="weather", current_user_id=user_id, visible_users=[user_id]
    )
    assert [h.episode_id for h in hits] == [mine]
    assert hits[0].line == "[Tim] Checked weather for Silver Spring, MD"

    cake = await recall_episodes(
        pool, query="cake", current_user_id=user_id, visible_users=[user_id]
    )
    assert [h.title for h in cake] == ["Planned a birthday party"]

    # an admin view across users ranks the current user's episodes first
    both = await recall_episodes(
        pool, query="weather", current_user_id=user_id, visible_users=[user_id, other]
    )
    assert [h.episode_id for h in both] == [mine, theirs]
    assert both[1].line == "[Emerson] Weather in Boston"
    assert both[0].score > both[1].score
    seen_by_emerson = await recall_episodes(
        pool, query="weather", current_user_id=other, visible_users=[user_id, other]
    )
    assert seen_by_emerson[0].episode_id == theirs

    # the user filter
    only = await recall_episodes(
        pool,
        query="weather",
        current_user_id=user_id,
        visible_users=[user_id, other],
        user_filter=other,
    )
    assert [h.episode_id for h in only] == [theirs]
