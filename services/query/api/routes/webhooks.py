"""Webhook subscriptions: ``/v1/webhooks`` (the contract: docs/webhooks.md).

A user key manages its user's subscriptions; an admin key manages the admin-wide
ones (every user's events), or a user's when it names one (``X-Engram-User``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from services.query.api.auth import Caller
from services.query.api.deps import Pool, Settings
from services.query.webhooks import subscriptions as subs
from shared.outbound import EndpointRefused

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


class SubscriptionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Field(min_length=8, max_length=2000, description="https://... to POST to")]
    events: list[subs.EventType] = Field(
        default_factory=list, max_length=20, description="event types; empty: every type"
    )
    description: Annotated[str | None, Field(max_length=500)] = None


class SubscriptionOut(BaseModel):
    id: uuid.UUID
    user_id: str | None = Field(description="whose events; null: every user's (admin)")
    url: str
    events: list[str]
    description: str | None
    active: bool
    created_at: datetime


class CreatedOut(SubscriptionOut):
    secret: str = Field(description="signs every delivery (docs/webhooks.md); shown only once")


class SubscriptionsOut(BaseModel):
    subscriptions: list[SubscriptionOut]


class DeliveryOut(BaseModel):
    event_id: uuid.UUID
    type: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None = Field(description="the failure's kind and status, never a body")
    created_at: datetime
    delivered_at: datetime | None


class DeliveriesOut(BaseModel):
    deliveries: list[DeliveryOut]


class ReplayedOut(BaseModel):
    replayed: int = Field(description="dead deliveries due again")


class DeletedOut(BaseModel):
    deleted: bool


async def owner(request: Request, who: Caller) -> str | None:
    """A user key: its user; an admin key: the user it names, else None (admin-wide)."""
    if who.is_admin:
        return request.headers.get("x-engram-user") or None
    return who.user_id


def _out(s: subs.Subscription) -> SubscriptionOut:
    return SubscriptionOut(**vars(s))


@router.post("", summary="Subscribe a URL to memory events", response_model=CreatedOut)
async def create(
    body: SubscriptionIn, request: Request, who: Caller, pool: Pool, settings: Settings
) -> CreatedOut:
    try:
        made = await subs.create(
            pool,
            settings,
            owner=await owner(request, who),
            url=body.url,
            events=list(body.events),
            description=body.description,
            allow=settings.webhook_endpoint_allow,
        )
    except EndpointRefused as exc:
        raise RequestValidationError(
            [{"loc": ("body", "url"), "msg": str(exc), "type": "endpoint_refused"}]
        ) from None
    return CreatedOut(**vars(made.subscription), secret=made.secret)


@router.get("", summary="The caller's webhook subscriptions", response_model=SubscriptionsOut)
async def listing(request: Request, who: Caller, pool: Pool) -> SubscriptionsOut:
    found = await subs.list_for(pool, owner=await owner(request, who))
    return SubscriptionsOut(subscriptions=[_out(s) for s in found])


@router.delete("/{sub_id}", summary="Delete a subscription", response_model=DeletedOut)
async def delete(sub_id: uuid.UUID, request: Request, who: Caller, pool: Pool) -> DeletedOut:
    await subs.delete(pool, owner=await owner(request, who), sub_id=sub_id)
    return DeletedOut(deleted=True)


@router.get(
    "/{sub_id}/deliveries",
    summary="A subscription's recent deliveries (status=dead: the dead list)",
    response_model=DeliveriesOut,
)
async def deliveries(
    sub_id: uuid.UUID,
    request: Request,
    who: Caller,
    pool: Pool,
    status: subs.DeliveryStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeliveriesOut:
    found = await subs.deliveries(
        pool, owner=await owner(request, who), sub_id=sub_id, status=status, limit=limit
    )
    return DeliveriesOut(deliveries=[DeliveryOut(**vars(d)) for d in found])


@router.post(
    "/{sub_id}/replay",
    summary="Send the subscription's dead deliveries again",
    response_model=ReplayedOut,
)
async def replay(sub_id: uuid.UUID, request: Request, who: Caller, pool: Pool) -> ReplayedOut:
    n = await subs.replay(pool, owner=await owner(request, who), sub_id=sub_id)
    return ReplayedOut(replayed=n)
