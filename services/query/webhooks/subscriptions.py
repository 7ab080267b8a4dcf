"""Webhook subscriptions and their deliveries: the API's use cases."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

import asyncpg

from shared.db import Executor, audit
from shared.embeddings import EmbeddingSettings
from shared.embeddings.crypto import encrypt
from shared.errors import InvalidRequest, NotFound
from shared.outbound import check_endpoint

EventType = Literal[
    "memory.learned",
    "fact.learned",
    "memory.updated",
    "memory.superseded",
    "memory.merged",
    "memory.archived",
    "memory.deleted",
    "episode.summarised",
    "rebuild.finished",
    "user.erased",
]
EVENT_TYPES: tuple[str, ...] = get_args(EventType)
MAX_PER_OWNER = 20


@dataclass(frozen=True)
class Subscription:
    id: uuid.UUID
    user_id: str | None
    url: str
    events: list[str]
    description: str | None
    active: bool
    created_at: datetime


@dataclass(frozen=True)
class Created:
    subscription: Subscription
    secret: str  # shown once


@dataclass(frozen=True)
class Delivery:
    event_id: uuid.UUID
    type: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


_COLUMNS = "id, user_id, url, events, description, active, created_at"


def _sub(r: asyncpg.Record) -> Subscription:
    return Subscription(
        r["id"], r["user_id"], r["url"], list(r["events"]), r["description"], r["active"],
        r["created_at"],
    )  # fmt: skip


async def create(
    pool: Executor,
    settings: EmbeddingSettings,
    *,
    owner: str | None,
    url: str,
    events: list[str],
    description: str | None,
    allow: str,
) -> Created:
    """A subscription of ``owner`` (None: every user's events, an admin's) to ``events``
    (empty: all); the URL must pass the outbound guard now, and again at every call."""
    unknown = sorted(set(events) - set(EVENT_TYPES))
    if unknown:
        raise InvalidRequest(
            f"unknown event type(s) {', '.join(unknown)}; use {', '.join(EVENT_TYPES)}"
        )
    await check_endpoint(url, allow)
    count = await pool.fetchval(
        "SELECT count(*) FROM webhook_subscriptions WHERE user_id IS NOT DISTINCT FROM $1",
        owner,
    )
    if count >= MAX_PER_OWNER:
        raise InvalidRequest(f"at most {MAX_PER_OWNER} webhook subscriptions per owner")
    secret = "whsec_" + secrets.token_urlsafe(32)
    try:
        row = await pool.fetchrow(
            f"""INSERT INTO webhook_subscriptions (user_id, url, events, secret_enc, description)
                VALUES ($1, $2, $3, $4, $5) RETURNING {_COLUMNS}""",
            owner,
            url,
            sorted(set(events)),
            encrypt(settings, secret),
            description,
        )
    except asyncpg.ForeignKeyViolationError:
        raise NotFound("no such user") from None
    assert row is not None
    await audit(
        pool,
        user_id=owner,
        actor="admin" if owner is None else "user",
        action="create",
        entity="webhook",
        entity_id=str(row["id"]),
        details={"events": sorted(set(events))},
    )
    return Created(_sub(row), secret)


async def list_for(pool: Executor, *, owner: str | None) -> list[Subscription]:
    rows = await pool.fetch(
        f"""SELECT {_COLUMNS} FROM webhook_subscriptions
            WHERE user_id IS NOT DISTINCT FROM $1 ORDER BY created_at""",
        owner,
    )
    return [_sub(r) for r in rows]


async def delete(pool: Executor, *, owner: str | None, sub_id: uuid.UUID) -> None:
    found = await pool.fetchval(
        "DELETE FROM webhook_subscriptions WHERE id = $1 AND user_id IS NOT DISTINCT FROM $2 "
        "RETURNING id",
        sub_id,
        owner,
    )
    if found is None:
        raise NotFound("no such webhook subscription")
    await audit(
        pool,
        user_id=owner,
        actor="admin" if owner is None else "user",
        action="delete",
        entity="webhook",
        entity_id=str(sub_id),
    )


async def _owned(pool: Executor, owner: str | None, sub_id: uuid.UUID) -> None:
    found = await pool.fetchval(
        "SELECT 1 FROM webhook_subscriptions WHERE id = $1 AND user_id IS NOT DISTINCT FROM $2",
        sub_id,
        owner,
    )
    if found is None:
        raise NotFound("no such webhook subscription")


DeliveryStatus = Literal["pending", "delivered", "dead"]


async def deliveries(
    pool: Executor,
    *,
    owner: str | None,
    sub_id: uuid.UUID,
    status: DeliveryStatus | None,
    limit: int,
) -> list[Delivery]:
    await _owned(pool, owner, sub_id)
    rows = await pool.fetch(
        """SELECT d.event_id, e.type, d.status, d.attempts, d.next_attempt_at, d.last_status,
                  d.last_error, e.created_at, d.delivered_at
           FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
           WHERE d.subscription_id = $1 AND ($2::text IS NULL OR d.status = $2)
           ORDER BY e.created_at DESC LIMIT $3""",
        sub_id,
        status,
        limit,
    )
    return [Delivery(**dict(r)) for r in rows]


async def replay(pool: Executor, *, owner: str | None, sub_id: uuid.UUID) -> int:
    """Dead deliveries of the subscription are due again, their attempts counted anew."""
    await _owned(pool, owner, sub_id)
    result = await pool.execute(
        """UPDATE webhook_deliveries SET status = 'pending', attempts = 0,
                  next_attempt_at = clock_timestamp()
           WHERE subscription_id = $1 AND status = 'dead'""",
        sub_id,
    )
    return int(result.split()[-1])
