"""Episode recall (Nous F010.1 / F010.5): search summaries, key points and topics.

- matches the episode's ``summary_text`` (title, summary, key points, topics) by
  full text, and by meaning when a query vector is given (70% semantic, 30% text);
- only episodes of ``visible_users`` (the caller's own id, or every user for an
  admin: None) and, when given, of ``user_filter``;
- episodes of the current user rank higher (others' scores x ``OTHER_USER_FACTOR``);
- each hit carries the user tag: ``[Tim] Checked weather for Silver Spring, MD``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.db import Executor

OTHER_USER_FACTOR = 0.8
SEMANTIC_WEIGHT = 0.7
TEXT_WEIGHT = 0.3

RECALL = """
WITH visible AS (
    SELECT e.id, e.user_id, e.summary_fts, e.embedding, e.embedding_state
    FROM episodes e
    WHERE e.summary IS NOT NULL
      AND ($1::text[] IS NULL OR e.user_id = ANY($1::text[]))
      AND ($2::text IS NULL OR e.user_id = $2)
),
text_hits AS (
    SELECT v.id, ts_rank_cd(v.summary_fts, to_tsquery('english', $3)) AS rank
    FROM visible v
    WHERE $3 <> '' AND v.summary_fts @@ to_tsquery('english', $3)
    ORDER BY rank DESC
    LIMIT 200
),
vector_hits AS (
    SELECT v.id, 1 - (v.embedding <=> $4::vector) AS similarity
    FROM visible v
    WHERE $4::vector IS NOT NULL AND v.embedding_state = 'ready'
    ORDER BY v.embedding <=> $4::vector
    LIMIT 200
),
scored AS (
    SELECT coalesce(t.id, s.id) AS id,
           CASE WHEN $4::vector IS NULL
                THEN coalesce(t.rank / nullif(max(t.rank) OVER (), 0), 0)
                ELSE $7 * greatest(coalesce(s.similarity, 0), 0)
                     + $8 * coalesce(t.rank / nullif(max(t.rank) OVER (), 0), 0)
           END AS base
    FROM text_hits t FULL JOIN vector_hits s ON s.id = t.id
)
SELECT e.id, e.user_id, coalesce(e.display_name, u.display_name, e.user_id) AS display_name,
       e.summary, e.started_at, e.last_active_at,
       sc.base * CASE WHEN e.user_id = $5 THEN 1.0 ELSE $6 END AS score
FROM scored sc
JOIN episodes e ON e.id = sc.id
JOIN users u ON u.id = e.user_id
ORDER BY score DESC, e.last_active_at DESC
LIMIT $9
"""

RECENT = """
SELECT e.id, e.user_id, coalesce(e.display_name, u.display_name, e.user_id) AS display_name,
       e.summary, e.started_at, e.last_active_at,
       CASE WHEN e.user_id = $3 THEN 1.0 ELSE $4 END AS score
FROM episodes e JOIN users u ON u.id = e.user_id
WHERE e.summary IS NOT NULL
  AND ($1::text[] IS NULL OR e.user_id = ANY($1::text[]))
  AND ($2::text IS NULL OR e.user_id = $2)
ORDER BY score DESC, e.last_active_at DESC
LIMIT $5
"""


@dataclass(frozen=True)
class EpisodeHit:
    episode_id: uuid.UUID
    user_id: str
    display_name: str
    title: str
    summary: str
    key_points: list[str]
    topics: list[str]
    outcome: str
    started_at: datetime
    score: float

    @property
    def line(self) -> str:
        """The recall line with the user tag: ``[Tim] Checked weather for Silver Spring, MD``."""
        return f"[{self.display_name}] {self.title}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode_id": str(self.episode_id),
            "user_id": self.user_id,
            "display_name": self.display_name,
            "line": self.line,
            "title": self.title,
            "summary": self.summary,
            "key_points": self.key_points,
            "topics": self.topics,
            "outcome": self.outcome,
            "started_at": self.started_at.isoformat(),
            "score": round(self.score, 4),
        }


def or_query(text: str) -> str:
    """A ``to_tsquery`` string matching any of the words (prefix match on each)."""
    terms = re.findall(r"[A-Za-z0-9]+", text.lower())
    return " | ".join(f"{t}:*" for t in dict.fromkeys(terms) if len(t) > 1)


async def recall_episodes(
    pool: Executor,
    *,
    query: str,
    current_user_id: str,
    visible_users: Sequence[str] | None,
    user_filter: str | None = None,
    query_vector: Sequence[float] | None = None,
    limit: int = 10,
) -> list[EpisodeHit]:
    """Episodes whose summary matches ``query``, best first.

    ``visible_users=None`` reads across users: only for an authorised admin call."""
    users = list(visible_users) if visible_users is not None else None
    q = or_query(query) if query.strip() not in ("", "*") else ""
    vec = list(query_vector) if query_vector is not None else None
    if not q and vec is None:
        rows = await pool.fetch(
            RECENT, users, user_filter, current_user_id, OTHER_USER_FACTOR, limit
        )
    else:
        rows = await pool.fetch(
            RECALL,
            users,
            user_filter,
            q,
            vec,
            current_user_id,
            OTHER_USER_FACTOR,
            SEMANTIC_WEIGHT,
            TEXT_WEIGHT,
            limit,
        )
    hits = []
    for r in rows:
        s = r["summary"] or {}
        hits.append(
            EpisodeHit(
                episode_id=r["id"],
                user_id=r["user_id"],
                display_name=r["display_name"],
                title=s.get("title", ""),
                summary=s.get("summary", ""),
                key_points=list(s.get("key_points", [])),
                topics=list(s.get("topics", [])),
                outcome=s.get("outcome", "informational"),
                started_at=r["started_at"],
                score=float(r["score"] or 0.0),
            )
        )
    return hits
