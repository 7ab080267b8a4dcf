"""Who is calling: Bearer API keys → a Principal (the browser's pages: a signed
session, ``services/query/ui/session.py``, which this never accepts).

Routes depend on :func:`principal` for the caller and on :func:`acting_user`
for the one user every read and write is scoped to. A user key always acts for
its own user; an admin key must name the user with the ``X-Engram-User`` header
(or ``user_id`` query parameter), except on the few admin-wide routes that take
:func:`principal` and check ``is_admin`` themselves. A user that was erased is
refused (410) until an admin re-enables it: erasure deletes the user's own keys,
so this is where an admin key acting for the id would otherwise store rows again
(every route, every tool, MCP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shared.apikeys import ApiKey, lookup_key
from shared.embeddings.user_settings import Stored
from shared.erasure import refuse_erased
from shared.errors import UserErased

# Declares the Bearer scheme in the OpenAPI (the docs' Authorize button); the
# header itself is read by _secret_from.
bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="apiKey",
    bearerFormat="engram API key",
    description="An engram API key (`engram keys create --user USER`). A user key acts "
    "for its user; an admin key names the user with the `X-Engram-User` header.",
)


@dataclass(frozen=True)
class Principal:
    key: ApiKey

    @property
    def is_admin(self) -> bool:
        return self.key.is_admin

    @property
    def user_id(self) -> str | None:
        return self.key.user_id

    def embedding_settings(self, user_id: str) -> Stored | None:
        """``user_id``'s embedding settings as read with this key (a user key acting for
        its own user), else None: the resolver reads them."""
        return self.key.embedding_settings if user_id == self.key.user_id else None


def _secret_from(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "Authorization header must be 'Bearer <api key>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return value.strip()
    return None


async def principal(
    request: Request,
    _documented: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)] = None,
) -> Principal:
    secret = _secret_from(request)
    if not secret:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing API key: send 'Authorization: Bearer <api key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    key = await lookup_key(request.app.state.runtime.pool, secret)
    if key is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "unknown or revoked API key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Principal(key)


async def acting_user(request: Request, who: Annotated[Principal, Depends(principal)]) -> str:
    """The user this call reads and writes as (kept on the request: read-your-writes
    keys a write by it, services/query/api/replica.py)."""
    user = await _acting_user(request, who)
    request.state.acting_user = user
    return user


async def _acting_user(request: Request, who: Principal) -> str:
    asked = request.headers.get("x-engram-user") or request.query_params.get("user_id")
    if who.is_admin:
        if not asked:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST,
                "an admin key must name the user: send the 'X-Engram-User' header",
            )
        try:
            await refuse_erased(request.app.state.runtime.pool, asked)
        except UserErased as exc:
            raise HTTPException(status.HTTP_410_GONE, str(exc)) from None
        return asked
    assert who.user_id is not None
    if asked and asked != who.user_id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this key cannot act for another user")
    return who.user_id


async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this call needs an admin key")
    return who


Caller = Annotated[Principal, Depends(principal)]
UserId = Annotated[str, Depends(acting_user)]
Admin = Annotated[Principal, Depends(admin)]
