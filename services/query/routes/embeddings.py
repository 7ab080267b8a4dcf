"""Embedding provider settings, the endpoint test, and rebuild-total (Nova 3.1.3, 3.2.7).

Flow of a provider change: ``PUT /v1/embeddings/settings`` stores it and says how
many rows a rebuild would touch; ``POST /v1/embeddings/rebuild`` starts it;
``GET /v1/embeddings/rebuild`` shows done/total.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from services.query.auth import UserId
from services.query.deps import Pool, Pub, Settings
from shared.embeddings import (
    ProbeResult,
    ProviderSettingsIn,
    ProviderSettingsOut,
    config_from_input,
    delete_provider_settings,
    get_provider_settings,
    probe_endpoint,
    put_provider_settings,
    resolve_config,
)
from shared.embeddings.rebuild import (
    RebuildCount,
    RebuildStatus,
    rebuild_count,
    rebuild_progress,
    start_rebuild,
)
from shared.embeddings.user_settings import stored_api_key
from shared.errors import InvalidRequest
from shared.outbound import EndpointRefused

router = APIRouter(prefix="/v1/embeddings", tags=["embeddings"])

T = TypeVar("T")


async def _endpoint_checked(work: Awaitable[T]) -> T:
    """A refused endpoint is the caller's input error: 422 naming ``endpoint_url``."""
    try:
        return await work
    except EndpointRefused as exc:
        raise RequestValidationError(
            [{"loc": ("body", "endpoint_url"), "msg": str(exc), "type": "endpoint_refused"}]
        ) from None


class SavedSettings(BaseModel):
    settings: ProviderSettingsOut
    rebuild_needed: bool
    rebuild: RebuildCount


class RebuildView(BaseModel):
    count: RebuildCount
    status: RebuildStatus | None


@router.get("/settings", summary="The caller's embedding provider settings and what is in effect")
async def get_settings(user: UserId, pool: Pool, settings: Settings) -> ProviderSettingsOut:
    return await get_provider_settings(pool, user, settings)


@router.put(
    "/settings",
    summary="Store the caller's provider (API key encrypted); says whether a rebuild is needed",
)
async def put_settings(
    body: ProviderSettingsIn, user: UserId, pool: Pool, settings: Settings
) -> SavedSettings:
    s = settings
    before = await resolve_config(pool, user, s)
    saved = await _endpoint_checked(put_provider_settings(pool, user, body, s))
    after = await resolve_config(pool, user, s)
    changed = after is not None and (
        before is None
        or (before.provider, before.model, before.endpoint_url, before.dimensions)
        != (after.provider, after.model, after.endpoint_url, after.dimensions)
    )
    return SavedSettings(
        settings=saved, rebuild_needed=changed, rebuild=await rebuild_count(pool, user)
    )


@router.delete("/settings", summary="Forget the caller's provider settings")
async def delete_settings(user: UserId, pool: Pool, settings: Settings) -> ProviderSettingsOut:
    return await delete_provider_settings(pool, user, settings)


@router.post(
    "/test",
    summary="Embed a probe text: dimensions and latency, or the provider's error",
    description="With a body, tests those settings before saving them (an omitted api_key "
    "means the stored one); without, tests the provider in effect for the caller.",
)
async def test_provider(
    user: UserId, pool: Pool, settings: Settings, body: ProviderSettingsIn | None = None
) -> ProbeResult:
    s = settings
    if body is not None:
        config = config_from_input(
            body, stored_key=await stored_api_key(pool, user, s, body.endpoint_url)
        )
    else:
        found = await resolve_config(pool, user, s)
        if found is None:
            raise InvalidRequest("no embedding provider is in effect (full-text-only mode)")
        config = found
    return await _endpoint_checked(probe_endpoint(config, s))


@router.get("/rebuild", summary="How many rows a rebuild touches, and the latest one's progress")
async def get_rebuild(user: UserId, pool: Pool) -> RebuildView:
    return RebuildView(
        count=await rebuild_count(pool, user), status=await rebuild_progress(pool, user)
    )


@router.post(
    "/rebuild",
    status_code=202,
    summary="Rebuild-total: re-embed every row (archived too) with the provider in effect",
)
async def post_rebuild(
    user: UserId, pool: Pool, publisher: Pub, settings: Settings
) -> RebuildStatus:
    return await start_rebuild(pool, user, settings, publisher=publisher)
