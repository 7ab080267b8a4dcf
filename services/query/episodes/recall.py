"""Episode recall (Nous F010.1 / F010.5): search summaries, key points and topics.

``POST /v1/episodes/search`` and the ``episode_recall`` tool both call :func:`recall`
(embed the query, then :func:`recall_episodes`); the ranking, here beside it:

- matches the episode's ``summary_text`` (title, summary, key points, topics) by
  full text (any of the query's words, ``sql.or_tsquery``), and by meaning when a
  query vector is given: 70% cosine similarity + 30% ``ts_rank_cd / max``;
- and through its own turns: the user's best turns for the query under the
  messages' own ranking (``EPISODE_TURNS``: the ``fused`` rules, ``turns.py``),
  an episode scoring its best turn's score (as a share of the best episode's);
  a summary says what a session was mostly about, the turns hold the detail a
  question asks for. Both scored by ``fusion.fuse`` under ``NOUS_EPISODES``
  (``fusion.py``): a fifth the summary, four fifths the turns. Turns are read
  for the users whose episodes are visible and may be listed (the caller, or the
  ones an admin names: others' turns by their words only, the query vector being
  the caller's model's); an all-users admin read matches summaries only;
- only episodes of ``visible_users`` (the caller's own id, or every user for an
  admin: None) and, when given, of ``user_filter``;
- episodes of the current user rank higher (others' scores x 0.8, the spec's
  ``other_user_factor``);
- a relevance floor: an episode (or a turn) is a candidate by meaning only at
  cosine similarity >= 0.3 (or by a shared word), so a query nothing is about
  returns few or none, not always ``limit``;
- each hit carries the user tag: ``[Tim] Checked weather for Silver Spring, MD``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from services.query.embeddings.query import SearchText, described, lists_newest
from services.query.memory.state import QueryState
from services.query.ranking.fusion import NOUS_EPISODES, Candidate, RankSpec, fuse, ranked
from services.query.ranking.sql import or_tsquery
from services.query.ranking.turns import rank_turns
from shared.db import Executor

OTHER_USER_FACTOR = NOUS_EPISODES.other_user_factor

# turn-searched users beyond this many (an admin's long list): summaries only
MAX_TURN_USERS = 10

# $1 visible users (NULL = all), $2 user filter, $3 query text, $4 query vector,
# $5 candidates per signal, $6 episodes found through their turns
RECALL = f"""
WITH q AS (SELECT {or_tsquery("$3")} AS tsq),
visible AS (
    SELECT e.user_id, e.id, e.summary_fts, e.embedding, e.embedding_state
    FROM episodes e
    WHERE e.summary IS NOT NULL
      AND ($1::text[] IS NULL OR e.user_id = ANY($1::text[]))
      AND ($2::text IS NULL OR e.user_id = $2)
),
text_hits AS (
    SELECT v.user_id, v.id FROM visible v, q
    WHERE v.summary_fts @@ q.tsq
    ORDER BY ts_rank_cd(v.summary_fts, q.tsq) DESC
    LIMIT $5
),
vector_hits AS (
    SELECT v.user_id, v.id FROM visible v
    WHERE $4::vector IS NOT NULL AND v.embedding_state = 'ready'
    ORDER BY v.embedding <=> $4::vector
    LIMIT $5
)
SELECT e.id, e.user_id, coalesce(e.display_name, u.display_name, e.user_id) AS display_name,
       e.summary, e.started_at, e.last_active_at,
       CASE WHEN e.summary_fts @@ q.tsq THEN ts_rank_cd(e.summary_fts, q.tsq)::float8 END
           AS rank,
       CASE WHEN $4::vector IS NOT NULL AND e.embedding_state = 'ready'
            THEN (e.embedding <=> $4::vector)::float8 END AS dist
FROM (SELECT user_id, id FROM text_hits UNION SELECT user_id, id FROM vector_hits
      UNION SELECT v.user_id, v.id FROM visible v WHERE v.id = ANY($6::uuid[])) AS c
JOIN episodes e ON e.user_id = c.user_id AND e.id = c.id  -- the key (migration 0170)
JOIN users u ON u.id = e.user_id, q
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


async def recall_episodes(
    pool: Executor,
    *,
    query: str,
    current_user_id: str,
    visible_users: Sequence[str] | None,
    user_filter: str | None = None,
    query_vector: Sequence[float] | None = None,
    limit: int = 10,
    spec: RankSpec = NOUS_EPISODES,
) -> list[EpisodeHit]:
    """Episodes whose summary matches ``query``, best first.

    ``visible_users=None`` reads across users: only for an authorised admin call."""
    users = list(visible_users) if visible_users is not None else None
    text = "" if lists_newest(query) else query
    vec = list(query_vector) if query_vector is not None else None
    rows: list[Any]
    if not text and vec is None:
        rows = list(
            await pool.fetch(RECENT, users, user_filter, current_user_id, OTHER_USER_FACTOR, limit)
        )
    else:
        through = await _best_turns(pool, spec, text, vec, current_user_id, users, user_filter)
        found = await pool.fetch(
            RECALL, users, user_filter, text, vec, spec.k(limit), list(through)
        )
        by_id = {r["id"]: r for r in found}
        cands = [
            Candidate(
                r["id"],
                rank=r["rank"],
                distance=r["dist"],
                owner=r["user_id"],
                turn=through.get(r["id"]),
            )
            for r in found
        ]
        best = ranked(
            spec,
            fuse(spec, cands, current_user=current_user_id),
            limit,
            tie=lambda c: -by_id[c.id]["last_active_at"].timestamp(),
        )
        rows = [{**dict(by_id[c.id]), "score": c.score} for c in best]
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


async def _best_turns(
    pool: Executor,
    spec: RankSpec,
    text: str,
    vector: list[float] | None,
    current_user_id: str,
    users: list[str] | None,
    user_filter: str | None,
) -> dict[uuid.UUID, float]:
    """Episode id -> the best score of its turns among each searched user's
    ``turn_hits`` best turns for the query (under ``spec.turns``).

    Searched: the filtered user, else each visible user (not an all-users read);
    the query vector ranks only the caller's own turns (another user's vectors may
    come from another model), theirs by words alone."""
    if spec.turns is None or spec.w_turn <= 0 or not text.strip():
        return {}
    if user_filter is not None:
        searched = [user_filter] if users is None or user_filter in users else []
    else:
        searched = users if users is not None and len(users) <= MAX_TURN_USERS else []
    best: dict[uuid.UUID, float] = {}
    for user in searched:
        hits = await rank_turns(
            pool,
            spec.turns,
            user_id=user,
            query=text,
            vector=vector if user == current_user_id else None,
            limit=spec.turn_hits,
        )
        for h in hits:
            episode = uuid.UUID(h.episode_id)
            best[episode] = max(best.get(episode, 0.0), h.score)
    return best


class RecallIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[
        SearchText,
        Field(description=described("what to find in the episodes' summaries and turns")),
    ]
    limit: int = Field(default=10, ge=1, le=50, description="results, 1-50")


async def recall(
    state: QueryState, pool: asyncpg.Pool, *, user_id: str, query: str, limit: int = 10
) -> dict[str, Any]:
    """The user's episodes, best first, each with its user tag line
    (``[Tim] Checked weather for Silver Spring, MD``)."""
    vector = None
    if not lists_newest(query):
        vector = await state.query_vector(pool, user_id=user_id, text=query)
    hits = await recall_episodes(
        pool,
        query=query,
        current_user_id=user_id,
        visible_users=[user_id],
        query_vector=vector,
        limit=limit,
    )
    return {
        "episodes": [h.as_dict() for h in hits],
        "mode": "hybrid" if vector is not None else "full_text",
    }
