"""Consolidation: a user's related memories become observations, refined as evidence arrives.

A background job per user, run by the extractor: every ``consolidate_interval_s``
for each user with memories stored since their last run (at most every
``consolidate_min_gap_s``), and on demand (:func:`request`: ``POST
/v1/memory/consolidate``: ``shared.memory.observations.request``), which the
next tick serves first. One run of one user (:func:`consolidate_user`):

1. **Clusters.** The user's live, embedded memories of the types in
   :data:`CONSOLIDATED` are grouped by scope, chat, namespace and embedding
   model, then clustered by leader: in the order they were stored, a memory
   joins the cluster of the most similar leader it is *related* to, else leads a
   cluster of its own. Related, with ``shared.memory.dedupe``'s bands: cosine
   >= ``ASK`` (0.80) whatever the subjects, or >= ``SAME_WORDS`` (0.60) with a
   subject (a person) in common. A memory already in an observation's evidence
   stays in it; an observation's leader is its seed (``key = 'seed:<id>'``).
2. **Observations.** A cluster of at least :data:`MIN_EVIDENCE` memories
   becomes an observation: a ``memory_items`` row of type ``observation``
   written by the one writer (``shared.memory.writer.insert_items``, Navi's
   keyed upsert on category ``observation`` and the seed's key), its evidence in
   ``observation_evidence`` (and, in ``data.evidence``: how many, the memories,
   turns and episodes, first and last seen: the memories' event times). Its
   text is the model's (``Extractor.observe``) when one is configured, else the
   offline rule (``shared.llm.offline.observation``): the cluster's statements,
   nearest its centroid first, each whole, at most five. New evidence
   *refines* it: the text is rewritten, the wording it replaces kept in
   ``data.history`` (the last :data:`HISTORY`), with the writer's audit line
   (``update``; ``create`` the first time) naming the evidence added.
   Observations never supersede nor are superseded (``shared.memory.supersession``).
3. **Cap.** Beyond ``memory_cap`` live memories (observations and episodes not
   counted), the excess is archived among those that are already consolidated
   (in an active observation's evidence), never read (``access_count = 0``),
   and not keyed (Navi's saved facts): lowest importance first, then fewest
   confirmations, then oldest. Each gets an audit line ``archive`` (reason
   ``compaction``, the observation holding it) and a ``MemoryChanged
   archived``. Fewer eligible than the excess: the cap is exceeded (counted).
4. **Profile.** When anything changed, the narrative summary
   (``services.extractor.narrative``) is rebuilt: observations first, then the
   facts no observation holds.

Nothing a user can see vanishes without an audit line: observations are
updated in place (audited, history kept), archived memories are audited, and
the profile's previous text is kept in its audit line.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from services.extractor.narrative import regenerate_user_summary
from shared.errors import EngramError
from shared.events import MemoryChanged
from shared.llm.jobs import Extractor
from shared.llm.offline import observation as offline_observation
from shared.memory.dedupe import ASK, SAME_WORDS
from shared.memory.supersession import AUDIT_ENTITY
from shared.memory.vectors import TextEmbedder, fit
from shared.memory.writer import NewItem, insert_items, publish_written
from shared.stream_registry import MEMORIES
from shared.streams import Publisher

log = logging.getLogger(__name__)

ACTOR = "consolidation"
CATEGORY = "observation"
MIN_EVIDENCE = 2
HISTORY = 20
MAX_LISTED = 50
"""``data.evidence`` lists at most this many memory, turn and episode ids (the count is all)."""
CONSOLIDATED = ("fact", "preference", "decision", "procedure", "workflow", "other")
BLOCK = 512

CANDIDATES = """
SELECT id, content, subjects, scope, provider, chat_id, namespace, theme,
       embedding_provider, embedding_model, embedding, valid_from, importance, confidence,
       confirmations, source_message_id, episode_id
FROM memory_items
WHERE user_id = $1 AND type = ANY($2::text[]) AND status = 'active' AND superseded_at IS NULL
  AND (expires_at IS NULL OR expires_at > now()) AND embedding_state = 'ready'
ORDER BY created_at, id
"""

OBSERVATIONS = """
SELECT o.id, o.key, o.content, o.data,
       coalesce(array_agg(e.memory_id) FILTER (WHERE e.memory_id IS NOT NULL), '{}') AS evidence
FROM memory_items o
     LEFT JOIN observation_evidence e ON e.user_id = o.user_id AND e.observation_id = o.id
WHERE o.user_id = $1 AND o.type = 'observation' AND o.status = 'active'
  AND o.superseded_at IS NULL
GROUP BY o.user_id, o.id  -- the primary key (migration 0170): the other columns follow
"""

ADD_EVIDENCE = """
INSERT INTO observation_evidence (observation_id, memory_id, user_id)
SELECT $1, m, $2 FROM unnest($3::uuid[]) AS m
ON CONFLICT DO NOTHING
"""

LIVE_COUNT = """
SELECT count(*) FROM memory_items
WHERE user_id = $1 AND type NOT IN ('observation', 'episode') AND status = 'active'
  AND superseded_at IS NULL AND (expires_at IS NULL OR expires_at > now())
"""

# The cap's compaction: the $2 lowest-ranked live memories that an active observation
# holds, never read, not keyed; archived with one audit line each.
COMPACT = f"""
WITH victims AS (
    SELECT m.id, (SELECT e.observation_id FROM observation_evidence e
                  JOIN memory_items o ON o.user_id = e.user_id AND o.id = e.observation_id
                  WHERE e.user_id = m.user_id AND e.memory_id = m.id AND o.status = 'active'
                    AND o.superseded_at IS NULL
                  ORDER BY e.added_at LIMIT 1) AS observation
    FROM memory_items m
    WHERE m.user_id = $1 AND m.type = ANY($3::text[]) AND m.status = 'active'
      AND m.superseded_at IS NULL AND m.access_count = 0 AND m.category IS NULL
      AND (m.expires_at IS NULL OR m.expires_at > now())
      AND EXISTS (SELECT 1 FROM observation_evidence e
                  JOIN memory_items o ON o.user_id = e.user_id AND o.id = e.observation_id
                  WHERE e.user_id = m.user_id AND e.memory_id = m.id AND o.status = 'active'
                    AND o.superseded_at IS NULL)
    ORDER BY m.importance, m.confirmations, m.valid_from, m.id
    LIMIT $2
    FOR UPDATE OF m SKIP LOCKED
),
archived AS (
    UPDATE memory_items m SET status = 'archived', updated_at = now()
    FROM victims v WHERE m.user_id = $1 AND m.id = v.id
    RETURNING m.id, v.observation
),
audited AS (
    INSERT INTO audit_log (user_id, actor, action, entity, entity_id, details)
    SELECT $1, '{ACTOR}', 'archive', '{AUDIT_ENTITY}', a.id::text,
           jsonb_build_object('reason', 'compaction', 'cap', $4::int,
                              'observation', a.observation)
    FROM archived a
)
SELECT id FROM archived
"""

# Users due: asked for (not since started), or with memories stored since their last
# run when that run is at least $1 old. Asked-for first.
DUE = """
SELECT u.id FROM users u LEFT JOIN consolidation_state s ON s.user_id = u.id
WHERE (s.requested_at IS NOT NULL AND (s.started_at IS NULL OR s.requested_at >= s.started_at))
   OR ((s.finished_at IS NULL OR s.finished_at < now() - $1::interval)
       AND EXISTS (SELECT 1 FROM memory_items m
                   WHERE m.user_id = u.id AND m.type <> 'observation'
                     AND m.created_at > coalesce(s.finished_at, '-infinity')))
ORDER BY s.requested_at NULLS LAST, u.id
LIMIT $2
"""

# A lease: one run of a user at a time (a run left unfinished for $2 is taken over).
CLAIM = """
INSERT INTO consolidation_state (user_id, started_at) VALUES ($1, now())
ON CONFLICT (user_id) DO UPDATE SET started_at = now()
WHERE consolidation_state.started_at IS NULL
   OR consolidation_state.finished_at >= consolidation_state.started_at
   OR consolidation_state.started_at < now() - $2::interval
RETURNING user_id
"""

FINISH = """
UPDATE consolidation_state
SET finished_at = now(), stats = $2,
    requested_at = CASE WHEN requested_at < started_at THEN NULL ELSE requested_at END
WHERE user_id = $1
"""


@dataclass
class Member:
    id: uuid.UUID
    content: str
    subjects: frozenset[uuid.UUID]
    theme: str
    valid_from: datetime
    importance: float
    confidence: float | None
    confirmations: int
    message_id: int | None
    episode_id: uuid.UUID | None
    row: int


@dataclass
class Existing:
    id: uuid.UUID
    seed: uuid.UUID
    content: str
    data: dict[str, Any]
    evidence: set[uuid.UUID]


@dataclass
class Stats:
    memories: int = 0
    clusters: int = 0
    created: int = 0
    refined: int = 0
    unchanged: int = 0
    archived: int = 0
    over_cap: int = 0
    model_fallbacks: int = 0
    profile: bool = False
    seconds: float = 0.0
    observations: list[uuid.UUID] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "observations"} | {
            "observations_written": len(self.observations)
        }


def related(similarity: float, a: frozenset[uuid.UUID], b: frozenset[uuid.UUID]) -> bool:
    """Whether two memories belong to one cluster (the module doc's rule)."""
    return similarity >= ASK or (similarity >= SAME_WORDS and bool(a & b))


def leaders(
    vectors: np.ndarray,
    subjects: Sequence[frozenset[uuid.UUID]],
    fixed: dict[int, int],
) -> dict[int, int]:
    """Each row's cluster leader (a row). ``fixed``: rows already in an observation ->
    that observation's leader row; they stay. The other rows, in order, join the most
    similar leader they are :func:`related` to, else lead. ``vectors``: unit rows."""
    out = dict(fixed)
    lead: list[int] = sorted(set(fixed.values()))
    free = [i for i in range(len(vectors)) if i not in fixed]
    for start in range(0, len(free), BLOCK):
        block = free[start : start + BLOCK]
        xb = vectors[block]
        known = np.asarray(lead, dtype=np.int64)
        to_known = xb @ vectors[known].T if len(known) else np.zeros((len(block), 0))
        within = xb @ xb.T
        new: list[int] = []  # positions in block of leaders found in this block
        for p, i in enumerate(block):
            best, best_sim = -1, -1.0
            row = to_known[p]
            for k in np.nonzero(row >= SAME_WORDS)[0].tolist():
                s = float(row[k])
                j = int(known[k])
                if s > best_sim and related(s, subjects[i], subjects[j]):
                    best, best_sim = j, s
            for q in new:
                s = float(within[p, q])
                j = block[q]
                if s > best_sim and related(s, subjects[i], subjects[j]):
                    best, best_sim = j, s
            if best < 0:
                out[i] = i
                new.append(p)
            else:
                out[i] = best
        lead.extend(block[q] for q in new)
    return out


async def consolidate_user(
    pool: asyncpg.Pool,
    user_id: str,
    extractor: Extractor,
    *,
    publisher: Publisher | None = None,
    embedder: TextEmbedder | None = None,
    dim: int = 384,
    cap: int | None = None,
) -> Stats:
    """One consolidation run of ``user_id`` (the module doc); what it did."""
    t0 = time.perf_counter()
    stats = Stats()
    async with pool.acquire() as conn:
        rows = await conn.fetch(CANDIDATES, user_id, list(CONSOLIDATED))
        existing = [
            Existing(
                id=r["id"],
                seed=uuid.UUID(r["key"].removeprefix("seed:")),
                content=r["content"],
                data=dict(r["data"] or {}),
                evidence=set(r["evidence"]),
            )
            for r in await conn.fetch(OBSERVATIONS, user_id)
            if (r["key"] or "").startswith("seed:")
        ]
    stats.memories = len(rows)
    groups: dict[tuple[Any, ...], list[asyncpg.Record]] = {}
    for r in rows:
        key = (r["scope"], r["provider"], r["chat_id"], r["namespace"], r["embedding_model"])
        groups.setdefault(key, []).append(r)
    holder = {m: o for o in existing for m in o.evidence}
    for group in groups.values():
        for members, obs in await asyncio.to_thread(_clusters, group, holder):
            stats.clusters += 1
            await _write(pool, user_id, members, obs, group[0], extractor, publisher,
                         embedder, dim, stats)  # fmt: skip
    if cap is not None:
        await _compact(pool, user_id, cap, publisher, stats)
    if stats.observations or stats.archived:
        try:
            await regenerate_user_summary(pool, user_id, extractor.narrative, actor=ACTOR)
            stats.profile = True
        except EngramError as exc:  # the model: the profile is rebuilt at the next change
            log.warning("profile of a user not rebuilt: %s", exc)
    stats.seconds = round(time.perf_counter() - t0, 3)
    return stats


def _clusters(
    group: list[asyncpg.Record], holder: dict[uuid.UUID, Existing]
) -> list[tuple[list[Member], Existing | None]]:
    """The clusters of one group worth writing: (members, their observation or None)."""
    members = [
        Member(
            id=r["id"],
            content=r["content"],
            subjects=frozenset(r["subjects"] or ()),
            theme=r["theme"],
            valid_from=r["valid_from"],
            importance=float(r["importance"]),
            confidence=r["confidence"],
            confirmations=r["confirmations"],
            message_id=r["source_message_id"],
            episode_id=r["episode_id"],
            row=i,
        )
        for i, r in enumerate(group)
    ]
    x = np.asarray([np.asarray(r["embedding"].to_numpy(), dtype=np.float32) for r in group])
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)
    row_of = {m.id: m.row for m in members}
    fixed: dict[int, int] = {}
    for o in {id(o): o for o in holder.values()}.values():
        rows = sorted(row_of[m] for m in o.evidence if m in row_of)
        if not rows:
            continue
        lead = row_of.get(o.seed, rows[0])
        for r in rows:
            fixed[r] = lead
    led = leaders(x, [m.subjects for m in members], fixed)
    clusters: dict[int, list[Member]] = {}
    for m in members:
        clusters.setdefault(led[m.row], []).append(m)
    out: list[tuple[list[Member], Existing | None]] = []
    for cluster in clusters.values():
        obs = next((holder[m.id] for m in cluster if m.id in holder), None)
        if obs is None and len(cluster) < MIN_EVIDENCE:
            continue
        if obs is not None and all(m.id in obs.evidence for m in cluster):
            continue  # nothing new
        centroid = x[[m.row for m in cluster]].mean(axis=0)
        near = {m.id: float(x[m.row] @ centroid) for m in cluster}
        cluster.sort(key=lambda m: (-near[m.id], -m.confirmations, m.valid_from))
        out.append((cluster, obs))
    return out


async def _write(
    pool: asyncpg.Pool,
    user_id: str,
    members: list[Member],
    obs: Existing | None,
    where: asyncpg.Record,
    extractor: Extractor,
    publisher: Publisher | None,
    embedder: TextEmbedder | None,
    dim: int,
    stats: Stats,
) -> None:
    statements = [m.content for m in members]
    rule = "offline"
    if extractor.heuristic:
        text = offline_observation(statements)
    else:
        try:
            text, rule = await extractor.observe(statements), "model"
        except EngramError as exc:  # invalid output or the model away: the stated rule
            log.info("observation written offline: %s", exc)
            text = offline_observation(statements)
            stats.model_fallbacks += 1
    vector: list[float] | None = None
    by: tuple[str, str] | None = None
    if embedder is not None:
        try:
            [vec] = await embedder.embed([text])
            provider, model = getattr(embedder, "provider", None), getattr(embedder, "model", None)
            if provider and model:
                vector, by = fit(vec, dim), (str(provider), str(model))
        except EngramError as exc:  # left pending: the embedder service embeds it
            log.info("observation not embedded inline: %s", exc)
    seed = obs.seed if obs is not None else min(members, key=lambda m: m.row).id
    before = obs.evidence if obs is not None else set()
    added = [m.id for m in members if m.id not in before]
    evidence = before | {m.id for m in members}
    prior = obs.data.get("evidence", {}) if obs is not None else {}
    first = min(m.valid_from for m in members).isoformat()
    last = max(m.valid_from for m in members).isoformat()
    data: dict[str, Any] = {
        "rule": rule,
        "evidence": {
            "count": len(evidence),
            "memory_ids": [str(m) for m in sorted(evidence, key=str)][:MAX_LISTED],
            "message_ids": sorted(
                {m.message_id for m in members if m.message_id is not None}
                | set(prior.get("message_ids", []))
            )[:MAX_LISTED],
            "episode_ids": sorted(
                {str(m.episode_id) for m in members if m.episode_id is not None}
                | set(prior.get("episode_ids", []))
            )[:MAX_LISTED],
            "first_seen": min(first, prior.get("first_seen") or first),
            "last_seen": max(last, prior.get("last_seen") or last),
        },
        "history": list(obs.data.get("history", [])) if obs is not None else [],
    }
    if obs is not None and obs.content != text:
        data["history"] = [
            *data["history"],
            {"content": obs.content, "evidence": len(before), "rule": obs.data.get("rule")},
        ][-HISTORY:]
    confidences = [m.confidence for m in members if m.confidence is not None]
    item = NewItem(
        type="observation",
        content=text,
        theme=Counter(m.theme for m in members).most_common(1)[0][0],
        scope=where["scope"],
        provider=where["provider"],
        chat_id=where["chat_id"],
        namespace=where["namespace"],
        category=CATEGORY,
        key=f"seed:{seed}",
        data=data,
        subjects=sorted({s for m in members for s in m.subjects}, key=str),
        source=ACTOR,
        confidence=max(confidences) if confidences else None,
        importance=max(m.importance for m in members),
        vector=vector,
        embedded_by=by,
        valid_from=min(m.valid_from for m in members),
        audit={
            "evidence": len(evidence),
            "added": [str(a) for a in added][:MAX_LISTED],
            "rule": rule,
            **({"previous": obs.content} if obs is not None and obs.content != text else {}),
        },
    )
    async with pool.acquire() as conn, conn.transaction():
        written = await insert_items(conn, user_id, [item], actor=ACTOR)
        [w] = written.items
        await conn.execute(ADD_EVIDENCE, w.id, user_id, [m.id for m in members])
    if publisher is not None:
        await publish_written(publisher, written)
    stats.observations.append(w.id)
    if obs is None:
        stats.created += 1
    else:
        stats.refined += 1


async def _compact(
    pool: asyncpg.Pool, user_id: str, cap: int, publisher: Publisher | None, stats: Stats
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        live = int(await conn.fetchval(LIVE_COUNT, user_id))
        if live <= cap:
            return
        excess = live - cap
        gone = [r["id"] for r in await conn.fetch(COMPACT, user_id, excess,
                                                  list(CONSOLIDATED), cap)]  # fmt: skip
    stats.archived = len(gone)
    stats.over_cap = excess - len(gone)
    if gone and publisher is not None:
        await publisher.publish(
            MEMORIES,
            [MemoryChanged(memory_id=i, user_id=user_id, change="archived") for i in gone],
        )


async def run_due(
    pool: asyncpg.Pool,
    extractor: Extractor,
    *,
    publisher: Publisher | None = None,
    embedder_for: Any = None,
    dim: int = 384,
    cap: int | None = None,
    min_gap: timedelta = timedelta(minutes=10),
    batch: int = 4,
    lease: timedelta = timedelta(minutes=30),
) -> dict[str, Stats]:
    """The scheduled tick: run every due user (at most ``batch``), each under a lease."""
    done: dict[str, Stats] = {}
    for r in await pool.fetch(DUE, min_gap, batch):
        user_id: str = r["id"]
        if await pool.fetchval(CLAIM, user_id, lease) is None:
            continue  # another replica runs it
        embedder = await embedder_for(user_id) if embedder_for is not None else None
        stats = await consolidate_user(
            pool, user_id, extractor, publisher=publisher, embedder=embedder, dim=dim, cap=cap
        )
        await pool.execute(FINISH, user_id, stats.as_dict())
        done[user_id] = stats
        log.info("consolidated %s: %s", user_id, stats.as_dict())
    return done
