"""Users: right to erasure. A user key may erase its own user; an admin key any user."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, status

from services.query.api import responses as R
from services.query.api.auth import Admin, Caller, forget_keys
from services.query.api.deps import Pool
from services.query.users import accounts as users_service

router = APIRouter(prefix="/v1/users", tags=["users"])


@router.delete(
    "/{user_id}",
    summary="Erase a user: every message, memory, vector, person, key, stream entry",
    response_model=R.ErasedOut,
)
async def erase(user_id: str, who: Caller, pool: Pool, request: Request) -> users_service.Erased:
    if not who.is_admin and who.user_id != user_id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this key cannot erase another user")
    actor = "admin" if who.is_admin else "user"
    rt = request.app.state.runtime
    erased = await users_service.erase_user(
        pool, user_id=user_id, actor=actor, redis=rt.redis, settings=rt.settings
    )
    forget_keys(request.app)  # the others hear it from PostgreSQL
    return erased


@router.post(
    "/{user_id}/reenable",
    summary="Let an erased user's id be used again: their new events are stored (admin key)",
    response_model=R.ReenabledOut,
)
async def reenable(user_id: str, who: Admin, pool: Pool) -> users_service.Reenabled:
    return await users_service.reenable(pool, user_id=user_id)
