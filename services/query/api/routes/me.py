"""Who am I: the key's user (or admin) — a cheap way for an agent to check its key."""

from __future__ import annotations

from fastapi import APIRouter

from services.query.api import responses as R
from services.query.api.auth import Caller

router = APIRouter(prefix="/v1", tags=["account"])


@router.get(
    "/me",
    summary="The caller's key: its user and whether it is an admin key",
    response_model=R.MeOut,
)
async def me(who: Caller) -> R.MeOut:
    return R.MeOut(user_id=who.user_id, admin=who.is_admin, key_prefix=who.key.prefix)
