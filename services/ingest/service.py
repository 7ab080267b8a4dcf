"""Ingest use cases: store turns and episode events. No FastStream, no HTTP here.

Guarantees: a turn is stored once per ``event_id`` (and once per platform
message id); its time is ``occurred_at``; a turn whose episode is closed is
still stored (and its episode is asked to be extracted again); a turn never
lands in another user's episode.

Per-chat order across the ``turns`` and ``episodes`` streams (docs/contracts.md,
"Episode closes") does not depend on which stream is read first: a close
records its time. It closes the chat's episode that started at or before it, at
the close's own ``occurred_at``, and later turns of the chat never join that
episode; turns that arrive after it with an earlier ``occurred_at`` still do. A
close that finds no episode yet is kept (``episode_closes``) and closes the
episode its turns open when they arrive. Every episode that closes, however it
closes (event, stale window inside a batch, sweeper), is asked to be extracted.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Generic, TypeVar
from zlib import crc32

import asyncpg

from shared import tracing
from shared.db import Conn
from shared.erasure import hold_users
from shared.events import (
    BatchResult,
    EmbedRequested,
    EmbedTarget,
    EpisodeClosed,
    EpisodeStarted,
    ExtractRequested,
    TurnReceived,
)
from shared.stream_registry import EMBED, EXTRACT
from shared.streams import Publisher
from shared.users import upsert_users

CONSUMER = "ingest"

# Known users with their name are only read: an upsert would lock (and dirty) each row.
CHANGED_USERS = """
SELECT k.id, k.display_name
FROM unnest($1::text[], $2::text[]) AS k(id, display_name)
LEFT JOIN users u ON u.id = k.id
WHERE u.id IS NULL
   OR (k.display_name IS NOT NULL AND u.display_name IS DISTINCT FROM k.display_name)
ORDER BY k.id
"""

# Each chat's current episode: the open one, else the latest closed one. A chat
# with no row has no episode at all.
LATEST_EPISODES = """
SELECT DISTINCT ON (e.user_id, e.provider, e.chat_id)
       e.id, e.user_id, e.provider, e.chat_id, e.status, e.started_at, e.last_active_at,
       e.closed_by, e.closed_at
FROM episodes e
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(user_id, provider, chat_id)
  ON e.user_id = k.user_id AND e.provider = k.provider AND e.chat_id = k.chat_id
ORDER BY e.user_id, e.provider, e.chat_id, (e.status = 'open') DESC, e.last_active_at DESC
"""

LOCK_CHATS = """
SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k ORDER BY k
"""

EPISODE_OWNERS = "SELECT id, user_id FROM episodes WHERE id = ANY($1::uuid[])"

# closed_by NULL: open; 'event': closed by a kept close at $8; 'stale': an old turn
# that fits no episode of its chat (history), closed at its last turn ($8).
INSERT_EPISODES = """
INSERT INTO episodes (id, user_id, display_name, provider, chat_id, started_at, last_active_at,
                      status, closed_at, closed_by, extract_due, extract_due_since)
SELECT u.id, u.user_id, u.display_name, u.provider, u.chat_id, u.at, u.at,
       CASE WHEN u.closed_by IS NULL THEN 'open' ELSE 'closed' END, u.closed_at, u.closed_by,
       u.closed_by IS NOT NULL, CASE WHEN u.closed_by IS NOT NULL THEN now() END
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
            $7::text[], $8::timestamptz[])
     AS u(id, user_id, display_name, provider, chat_id, at, closed_by, closed_at)
ON CONFLICT (user_id, id) DO NOTHING
"""

# The chat's episode whose time span (widened by the stale window) holds $4; an
# episode closed by an event never takes a turn later than its close.
COVERING_EPISODE = """
SELECT id, status, started_at, last_active_at, closed_by, closed_at FROM episodes
WHERE user_id = $1 AND provider = $2 AND chat_id = $3
  AND started_at - $5::interval <= $4 AND last_active_at + $5::interval >= $4
  AND (closed_by IS DISTINCT FROM 'event' OR closed_at >= $4)
ORDER BY (status = 'open') DESC, last_active_at DESC
LIMIT 1
"""

# Closes that found no episode yet, for the chats (or named episodes) of a batch.
KEPT_CLOSES = """
SELECT c.event_id, c.user_id, c.provider, c.chat_id, c.episode_id, c.closed_at
FROM episode_closes c
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(user_id, provider, chat_id)
  ON c.user_id = k.user_id AND c.provider = k.provider AND c.chat_id = k.chat_id
ORDER BY c.closed_at
"""

DROP_CLOSES = "DELETE FROM episode_closes WHERE event_id = ANY($1::uuid[])"

CLOSE_STALE = """
UPDATE episodes SET status = 'closed', closed_at = last_active_at, closed_by = 'stale',
                    extract_due = true, extract_due_since = now(), updated_at = now()
WHERE id = ANY($1::uuid[]) AND status = 'open'
RETURNING id, user_id
"""

INSERT_MESSAGES = """
INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, display_name,
                      content, tool_name, tool_args, tool_result, external_id, occurred_at,
                      metadata)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::jsonb[], $11::jsonb[], $12::text[],
                     $13::timestamptz[], $14::jsonb[])
ON CONFLICT DO NOTHING
RETURNING id, user_id, episode_id, occurred_at
"""

EVENTS_OF_MESSAGES = "SELECT id, event_id FROM messages WHERE id = ANY($1::bigint[])"

PENDING_FOR_EVENTS = """
SELECT id, user_id FROM messages
WHERE event_id = ANY($1::uuid[]) AND embedding_state = 'pending'
"""

# No index holds turn_count, last_active_at, closed_at or extract_due_since, so this
# is a HOT update (0041). A stale-closed episode's close follows its last turn; a
# turn stored in a closed episode makes it due for extraction again.
TOUCH_EPISODES = """
UPDATE episodes e
SET turn_count = e.turn_count + u.n,
    last_active_at = greatest(e.last_active_at, u.last_at),
    started_at = least(e.started_at, u.first_at),
    closed_at = CASE WHEN e.closed_by = 'stale'
                     THEN greatest(e.closed_at, e.last_active_at, u.last_at)
                     ELSE e.closed_at END,
    extract_due_since = CASE WHEN e.status = 'closed' AND NOT e.extract_due THEN now()
                             ELSE e.extract_due_since END,
    extract_due = e.extract_due OR e.status = 'closed',
    updated_at = now()
FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::timestamptz[])
     AS u(id, n, first_at, last_at)
WHERE e.id = u.id
RETURNING e.id, e.user_id, e.status
"""


def _chat_lock(key: tuple[str, str, str]) -> int:
    """A 64-bit advisory lock id for one (user, provider, chat)."""
    a = crc32("\x1f".join(key).encode())
    b = crc32(("chat\x1f" + "\x1f".join(key)).encode())
    return ((a << 32) | b) - (1 << 63)


@dataclass
class _Span:
    """An episode of one chat as planning sees it: its time span, whether it is open,
    and the time of the close event that closed it (no later turn joins it)."""

    id: uuid.UUID
    started_at: datetime
    last_active_at: datetime
    open: bool
    cap: datetime | None = None

    def covers(self, t: datetime, window: timedelta) -> bool:
        if self.cap is not None and t > self.cap:
            return False
        return self.started_at - window <= t <= self.last_active_at + window

    @classmethod
    def of(cls, r: asyncpg.Record) -> _Span:
        cap = r["closed_at"] if r["closed_by"] == "event" else None
        return cls(r["id"], r["started_at"], r["last_active_at"], r["status"] == "open", cap)

    def add(self, t: datetime) -> None:
        self.started_at = min(self.started_at, t)
        self.last_active_at = max(self.last_active_at, t)


E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class _Item(Generic[E]):
    """An event and its position in the batch the use case was given."""

    pos: int
    event: E


@dataclass
class _NewEpisode:
    user_id: str
    display_name: str | None
    provider: str
    chat_id: str
    span: _Span


@dataclass
class _Plan:
    new_episodes: dict[uuid.UUID, _NewEpisode] = field(default_factory=dict)
    stale: set[uuid.UUID] = field(default_factory=set)
    episode_of: dict[int, uuid.UUID] = field(default_factory=dict)
    used_closes: set[uuid.UUID] = field(default_factory=set)


@dataclass
class _KeptClose:
    event_id: uuid.UUID
    episode_id: uuid.UUID | None
    closed_at: datetime


async def store_turns(
    pool: asyncpg.Pool,
    publisher: Publisher,
    turns: Sequence[TurnReceived],
    *,
    stale_window: timedelta,
) -> BatchResult:
    """Store a batch of turns in one transaction, then ask for their embeddings.

    Turns are named by their position in ``turns`` (which is in arrival order):
    the result holds the refused ones with the reason, and those of erased users,
    dropped."""
    # One row per event id, even if the batch repeats an event.
    unique: dict[uuid.UUID, _Item[TurnReceived]] = {}
    for i, ev in enumerate(turns):
        unique.setdefault(ev.event_id, _Item(i, ev))
    batch = sorted(unique.values(), key=lambda d: (d.event.occurred_at, d.pos))
    result = BatchResult()
    rejected = result.refused
    extract: list[ExtractRequested] = []

    async with pool.acquire() as conn, conn.transaction():
        # Turns of an erased user are dropped (shared/erasure.py), checked under its lock.
        erased = await hold_users(conn, [d.event.user_id for d in batch])
        result.dropped.update(i for i, ev in enumerate(turns) if ev.user_id in erased)
        if erased:
            batch = [d for d in batch if d.event.user_id not in erased]
        # Locks in one order everywhere (users, then chats sorted, then rows), the same
        # as the episode handler's, so a turn batch and a close never deadlock.
        await conn.execute(
            LOCK_CHATS,
            sorted(
                {_chat_lock((d.event.user_id, d.event.provider, d.event.chat_id)) for d in batch}
            ),
        )
        users: dict[str, str | None] = {}
        for d in batch:
            name = d.event.display_name if d.event.role == "user" else None
            if name or d.event.user_id not in users:
                users[d.event.user_id] = name or users.get(d.event.user_id)
        # Rows are locked in a fixed order so concurrent batches never deadlock.
        ordered = sorted(users)
        changed = await conn.fetch(CHANGED_USERS, ordered, [users[u] for u in ordered])
        if changed:
            await upsert_users(
                conn, [r["id"] for r in changed], [r["display_name"] for r in changed]
            )

        plan = await _plan_episodes(conn, batch, stale_window, rejected)
        if plan.new_episodes:
            ids = sorted(plan.new_episodes)
            rows = [plan.new_episodes[i] for i in ids]
            closed_by = [
                None if r.span.open else ("event" if r.span.cap else "stale") for r in rows
            ]
            await conn.execute(
                INSERT_EPISODES,
                ids,
                [r.user_id for r in rows],
                [r.display_name for r in rows],
                [r.provider for r in rows],
                [r.chat_id for r in rows],
                [r.span.started_at for r in rows],
                closed_by,
                [r.span.cap or r.span.last_active_at for r in rows],
            )
        if plan.used_closes:
            await conn.execute(DROP_CLOSES, list(plan.used_closes))
        if plan.stale:
            for row in await conn.fetch(CLOSE_STALE, list(plan.stale)):
                extract.append(
                    ExtractRequested(episode_id=row["id"], user_id=row["user_id"], reason="stale")
                )

        kept = [d for d in batch if d.pos not in rejected]
        inserted = await conn.fetch(
            INSERT_MESSAGES,
            [d.event.event_id for d in kept],
            [d.event.user_id for d in kept],
            [plan.episode_of[d.pos] for d in kept],
            [d.event.provider for d in kept],
            [d.event.chat_id for d in kept],
            [d.event.role for d in kept],
            [d.event.display_name for d in kept],
            [d.event.content for d in kept],
            [d.event.tool_name for d in kept],
            [d.event.tool_args for d in kept],
            [d.event.tool_result for d in kept],
            [d.event.external_message_id for d in kept],
            [d.event.occurred_at for d in kept],
            [d.event.metadata for d in kept],
        )
        touched: dict[uuid.UUID, list[datetime]] = defaultdict(list)
        for row in inserted:
            touched[row["episode_id"]].append(row["occurred_at"])
        if touched:
            ids = sorted(touched)
            asked = {e.episode_id for e in extract}
            for row in await conn.fetch(
                TOUCH_EPISODES,
                ids,
                [len(touched[i]) for i in ids],
                [min(touched[i]) for i in ids],
                [max(touched[i]) for i in ids],
            ):
                # Closed in this batch, or a late turn re-arms a closed episode's summary.
                if row["status"] == "closed" and row["id"] not in asked:
                    extract.append(ExtractRequested(episode_id=row["id"], user_id=row["user_id"]))
        to_embed = [(r["id"], r["user_id"]) for r in inserted]
        if len(inserted) < len(kept):
            # Redelivered turns: ask again for any embedding still pending, in case the
            # first delivery committed but never got to publish its request.
            seen = {r["id"] for r in inserted}
            for r in await conn.fetch(PENDING_FOR_EVENTS, [d.event.event_id for d in kept]):
                if r["id"] not in seen:
                    to_embed.append((r["id"], r["user_id"]))

    if tracing.active():
        await _request_traced_embeddings(pool, publisher, to_embed, batch)
    else:
        await publisher.publish(EMBED, _embed_requests(to_embed))
    if extract:
        await publisher.publish(EXTRACT, extract)
    return result


async def _plan_episodes(
    conn: Conn,
    batch: Sequence[_Item[TurnReceived]],
    stale_window: timedelta,
    rejected: dict[int, str],
) -> _Plan:
    """Decide each turn's episode (the batch is in time order).

    The episode the turn names; else the chat's episode whose span, widened by
    the stale window, holds the turn's time (the open one first); else, for a
    turn later than all of them, a new open episode (the stale one closes);
    else (an old turn arriving late) a new closed episode of its own.
    """
    plan = _Plan()
    explicit = {d.event.episode_id for d in batch if d.event.episode_id is not None}
    owners: dict[uuid.UUID, str] = {}
    if explicit:
        owners = {r["id"]: r["user_id"] for r in await conn.fetch(EPISODE_OWNERS, list(explicit))}

    all_keys = sorted({(d.event.user_id, d.event.provider, d.event.chat_id) for d in batch})
    keys = sorted(
        {
            (d.event.user_id, d.event.provider, d.event.chat_id)
            for d in batch
            if d.event.episode_id is None
        }
    )
    spans: dict[tuple[str, str, str], list[_Span]] = {k: [] for k in keys}
    # Closes kept until their turns arrive: by chat (unnamed) and by named episode.
    kept: dict[tuple[str, str, str], list[_KeptClose]] = defaultdict(list)
    kept_named: dict[uuid.UUID, _KeptClose] = {}
    # Consumers in the same group may hold turns of the same chat, and ingest's close
    # handler works on the same chats: serialise per chat so two of them never open
    # two episodes for it, and a close and its turns never miss each other.
    await conn.execute(LOCK_CHATS, sorted({_chat_lock(k) for k in all_keys}))
    for r in await conn.fetch(
        KEPT_CLOSES, [k[0] for k in all_keys], [k[1] for k in all_keys], [k[2] for k in all_keys]
    ):
        close = _KeptClose(r["event_id"], r["episode_id"], r["closed_at"])
        if close.episode_id is not None:
            kept_named.setdefault(close.episode_id, close)
        else:
            kept[(r["user_id"], r["provider"], r["chat_id"])].append(close)
    if keys:
        for r in await conn.fetch(
            LATEST_EPISODES, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]
        ):
            key = (r["user_id"], r["provider"], r["chat_id"])
            spans[key].append(_Span.of(r))

    for d in batch:
        ev = d.event
        if ev.episode_id is not None:
            owner = owners.get(ev.episode_id)
            if owner is None and ev.episode_id not in plan.new_episodes:
                named_span = _Span(ev.episode_id, ev.occurred_at, ev.occurred_at, open=True)
                named = kept_named.get(ev.episode_id)
                if named is not None:
                    named_span.open, named_span.cap = False, named.closed_at
                    plan.used_closes.add(named.event_id)
                plan.new_episodes[ev.episode_id] = _NewEpisode(
                    ev.user_id, _user_name(ev), ev.provider, ev.chat_id, named_span
                )
                owners[ev.episode_id] = ev.user_id
            elif owner is not None and owner != ev.user_id:
                rejected[d.pos] = (
                    f"episode {ev.episode_id} belongs to another user; turn not stored"
                )
                continue
            plan.episode_of[d.pos] = ev.episode_id
            _name_new_episode(plan, ev.episode_id, ev)
            continue
        key = (ev.user_id, ev.provider, ev.chat_id)
        span = await _span_for(conn, key, spans[key], ev.occurred_at, stale_window)
        if span is None:
            latest = max((s.last_active_at for s in spans[key]), default=None)
            later = latest is None or ev.occurred_at > latest
            if later:
                for s in spans[key]:
                    if s.open:
                        s.open = False
                        if s.id not in plan.new_episodes:
                            plan.stale.add(s.id)
            span = _Span(uuid.uuid4(), ev.occurred_at, ev.occurred_at, open=later)
            # A close that came before its turns: the first one at or after this turn
            # closes the episode the turn opens.
            kept_close = next((c for c in kept[key] if c.closed_at >= ev.occurred_at), None)
            if kept_close is not None:
                kept[key].remove(kept_close)
                plan.used_closes.add(kept_close.event_id)
                span.open, span.cap = False, kept_close.closed_at
            spans[key].append(span)
            plan.new_episodes[span.id] = _NewEpisode(
                ev.user_id, _user_name(ev), ev.provider, ev.chat_id, span
            )
        span.add(ev.occurred_at)
        plan.episode_of[d.pos] = span.id
        _name_new_episode(plan, span.id, ev)
    return plan


def _user_name(ev: TurnReceived) -> str | None:
    """The user's display name a turn carries: only a user turn's (an assistant's or
    another participant's turn names its own speaker, not the user)."""
    return ev.display_name if ev.role == "user" else None


def _name_new_episode(plan: _Plan, episode: uuid.UUID, ev: TurnReceived) -> None:
    """A new episode opened by a turn that was not the user's takes the name of the
    first user turn of the batch in it (else it stays unnamed: the user's own name)."""
    new = plan.new_episodes.get(episode)
    if new is not None and new.display_name is None:
        new.display_name = _user_name(ev)


async def _span_for(
    conn: Conn,
    key: tuple[str, str, str],
    known: list[_Span],
    t: datetime,
    window: timedelta,
) -> _Span | None:
    """The known episode that holds ``t`` (open first), else one from the database."""
    for s in sorted(known, key=lambda s: not s.open):
        if s.covers(t, window):
            return s
    if all(t > s.last_active_at + window for s in known):
        # Later than the chat's latest episode, or the chat has none: a new session.
        return None
    row = await conn.fetchrow(COVERING_EPISODE, *key, t, window)
    if row is None or any(s.id == row["id"] for s in known):
        return None
    span = _Span.of(row)
    known.append(span)
    return span


def _embed_requests(rows: Sequence[tuple[int, str]]) -> list[EmbedRequested]:
    """One request for the whole batch: a batch of many users' turns costs one event,
    not one per user. It names the user when there is one; otherwise the embedder
    takes each row's owner from the row."""
    if not rows:
        return []
    users = {user_id for _, user_id in rows}
    targets = [EmbedTarget(kind="message", id=str(message_id)) for message_id, _ in rows]
    return [EmbedRequested(user_id=users.pop() if len(users) == 1 else None, targets=targets)]


async def _request_traced_embeddings(
    pool: asyncpg.Pool,
    publisher: Publisher,
    rows: Sequence[tuple[int, str]],
    turns: Sequence[_Item[TurnReceived]],
) -> None:
    """:func:`_embed_requests` for a traced batch (``shared.tracing``): one request per
    sampled turn's trace (each continuing it) plus one for the unsampled turns, in the
    same round trip. Which turn a row holds is read here, after the commit, so an
    untraced batch pays nothing for it."""
    if not rows:
        return
    trace_of = tracing.traces_by_cause([d.event for d in turns])
    event_of: dict[int, uuid.UUID] = {
        r["id"]: r["event_id"]
        for r in await pool.fetch(EVENTS_OF_MESSAGES, [message_id for message_id, _ in rows])
    }
    by_trace: dict[str | None, list[tuple[int, str]]] = defaultdict(list)
    for row in rows:
        event_id = event_of.get(row[0])
        by_trace[trace_of.get(event_id) if event_id is not None else None].append(row)
    await publisher.publish(
        EMBED,
        [
            request.model_copy(update={"trace": trace})
            for trace, some in by_trace.items()
            for request in _embed_requests(some)
        ],
    )


async def handle_episode_events(
    pool: asyncpg.Pool,
    publisher: Publisher,
    events: Sequence[EpisodeStarted | EpisodeClosed],
) -> BatchResult:
    """Apply episode started / closed events in order; closing asks for extraction.

    Events are named by their position in ``events`` (arrival order); those of
    erased users are dropped (not stored, deleted from the stream)."""
    result = BatchResult()
    rejected = result.refused
    extract: list[ExtractRequested] = []
    deliveries = [_Item(i, ev) for i, ev in enumerate(events)]
    async with pool.acquire() as conn, conn.transaction():
        erased = await hold_users(conn, [d.event.user_id for d in deliveries])
        result.dropped.update(d.pos for d in deliveries if d.event.user_id in erased)
        await conn.execute(
            LOCK_CHATS,
            sorted(
                {
                    _chat_lock((d.event.user_id, d.event.provider, d.event.chat_id))
                    for d in deliveries
                    if d.event.user_id not in erased
                }
            ),
        )
        for d in sorted(deliveries, key=lambda x: (x.event.occurred_at, x.pos)):
            ev = d.event
            if ev.user_id in erased:
                continue
            asked = len(extract)
            await conn.execute(LOCK_CHATS, [_chat_lock((ev.user_id, ev.provider, ev.chat_id))])
            first = await conn.fetchval(
                """
                INSERT INTO processed_events (event_id, consumer) VALUES ($1, $2)
                ON CONFLICT DO NOTHING RETURNING true
                """,
                ev.event_id,
                CONSUMER,
            )
            if isinstance(ev, EpisodeStarted):
                if first:
                    reason = await _start_episode(conn, ev, extract)
                    if reason:
                        rejected[d.pos] = reason
            else:
                reason = await _close_episode(conn, ev, extract, first=bool(first))
                if reason:
                    rejected[d.pos] = reason
            if tracing.active():  # the extraction an event asked for continues its trace
                extract[asked:] = [tracing.carry(e, ev) for e in extract[asked:]]
    if extract:
        await publisher.publish(EXTRACT, extract)
    return result


CLOSE_PREVIOUS = """
UPDATE episodes SET status = 'closed', closed_at = $4, closed_by = 'started', extract_due = true,
                    extract_due_since = now(), updated_at = now()
WHERE user_id = $1 AND provider = $2 AND chat_id = $3 AND status = 'open'
RETURNING id, user_id
"""

# The episode a close without an episode id closes: the chat's latest one that
# started at or before the close.
CLOSE_TARGET = """
SELECT id, user_id, status, closed_by, closed_at, last_active_at FROM episodes
WHERE user_id = $1 AND provider = $2 AND chat_id = $3 AND started_at <= $4
ORDER BY started_at DESC
LIMIT 1
"""

CLOSE_BY_EVENT = """
UPDATE episodes
SET status = 'closed', closed_at = $2, closed_by = 'event', extract_due = true,
    extract_due_since = CASE WHEN extract_due THEN extract_due_since ELSE now() END,
    updated_at = now()
WHERE id = $1
"""

# Turns of a later session that joined the episode before its close was handled
# (the close came after them) move to an episode of their own.
SPLIT_LATER = """
WITH moved AS (
    UPDATE messages SET episode_id = $3
    WHERE episode_id = $1 AND occurred_at > $2
    RETURNING occurred_at
)
SELECT count(*) AS n, min(occurred_at) AS first_at, max(occurred_at) AS last_at FROM moved
"""

KEEP_CLOSE = """
INSERT INTO episode_closes (event_id, user_id, provider, chat_id, episode_id, closed_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (user_id, event_id) DO NOTHING
"""


async def _split_after(conn: Conn, episode_id: uuid.UUID, closed_at: datetime) -> None:
    """Move the turns later than the close out of the episode it closed, into a new
    open episode of the same chat (the next session)."""
    new_id = uuid.uuid4()
    ep = await conn.fetchrow(
        "SELECT user_id, display_name, provider, chat_id FROM episodes WHERE id = $1", episode_id
    )
    if ep is None:
        return
    await conn.execute(
        """INSERT INTO episodes (id, user_id, display_name, provider, chat_id, started_at,
                                 last_active_at)
           VALUES ($1, $2, $3, $4, $5, $6, $6)""",
        new_id,
        ep["user_id"],
        ep["display_name"],
        ep["provider"],
        ep["chat_id"],
        closed_at,
    )
    moved = await conn.fetchrow(SPLIT_LATER, episode_id, closed_at, new_id)
    if moved is None or not moved["n"]:
        await conn.execute("DELETE FROM episodes WHERE id = $1", new_id)
        return
    await conn.execute(
        "UPDATE episodes SET started_at = $2, last_active_at = $3, turn_count = $4 WHERE id = $1",
        new_id,
        moved["first_at"],
        moved["last_at"],
        moved["n"],
    )
    await conn.execute(
        """UPDATE episodes
           SET turn_count = turn_count - $2,
               last_active_at = coalesce(
                   (SELECT max(occurred_at) FROM messages WHERE episode_id = $1), started_at)
           WHERE id = $1""",
        episode_id,
        moved["n"],
    )


async def _start_episode(
    conn: Conn, ev: EpisodeStarted, extract: list[ExtractRequested]
) -> str | None:
    owner = await conn.fetchval("SELECT user_id FROM episodes WHERE id = $1", ev.episode_id)
    if owner is not None:
        return None if owner == ev.user_id else (f"episode {ev.episode_id} belongs to another user")
    await upsert_users(conn, [ev.user_id], [ev.display_name])
    # A new session in a chat ends the chat's previous open one.
    for row in await conn.fetch(
        CLOSE_PREVIOUS, ev.user_id, ev.provider, ev.chat_id, ev.occurred_at
    ):
        extract.append(ExtractRequested(episode_id=row["id"], user_id=row["user_id"]))
    await conn.execute(
        """
        INSERT INTO episodes (id, user_id, display_name, provider, chat_id, frame, started_at,
                              last_active_at, metadata)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)
        ON CONFLICT (user_id, id) DO NOTHING
        """,
        ev.episode_id,
        ev.user_id,
        ev.display_name,
        ev.provider,
        ev.chat_id,
        ev.frame,
        ev.occurred_at,
        ev.metadata,
    )
    # Its close may have come first.
    kept = await conn.fetchrow(
        "SELECT event_id, closed_at FROM episode_closes WHERE episode_id = $1 "
        "ORDER BY closed_at LIMIT 1",
        ev.episode_id,
    )
    if kept is not None:
        await conn.execute(CLOSE_BY_EVENT, ev.episode_id, kept["closed_at"])
        await conn.execute(DROP_CLOSES, [kept["event_id"]])
        extract.append(ExtractRequested(episode_id=ev.episode_id, user_id=ev.user_id))
    return None


async def _close_episode(
    conn: Conn,
    ev: EpisodeClosed,
    extract: list[ExtractRequested],
    *,
    first: bool,
) -> str | None:
    """Close the episode the event names, else the chat's episode that started at or
    before the close, at the close's ``occurred_at``. A close that finds no episode
    yet is kept for the turns it closes (ingest reads ``turns`` and ``episodes``
    independently, so it may be handled before them)."""
    c = ev.occurred_at

    async def keep() -> None:
        if first:  # a redelivered close was kept (or used) the first time
            await upsert_users(conn, [ev.user_id], [None])
            await conn.execute(
                KEEP_CLOSE, ev.event_id, ev.user_id, ev.provider, ev.chat_id, ev.episode_id, c
            )

    if ev.episode_id is not None:
        row = await conn.fetchrow(
            "SELECT id, user_id, status, closed_by, closed_at FROM episodes WHERE id = $1",
            ev.episode_id,
        )
        if row is None:
            await keep()
            return None
        if row["user_id"] != ev.user_id:
            return f"episode {ev.episode_id} belongs to another user"
    else:
        row = await conn.fetchrow(CLOSE_TARGET, ev.user_id, ev.provider, ev.chat_id, c)
        if row is None:
            await keep()
            return None
        if row["closed_by"] == "event" and row["closed_at"] < c:
            # That episode had its own close; this one closes a later session
            # whose turns are still on their way.
            await keep()
            return None
    if ev.episode_id is not None or row["closed_by"] != "event":
        # (an unnamed close finding its episode already closed by an event at or
        # after its time is a redelivery: nothing to change)
        await conn.execute(CLOSE_BY_EVENT, row["id"], c)
        if ev.episode_id is None:
            await _split_after(conn, row["id"], c)
    # Asked again on a redelivery too: the extractor is idempotent.
    extract.append(ExtractRequested(episode_id=row["id"], user_id=ev.user_id))
    return None
