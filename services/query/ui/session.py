"""Logging in to the memory browser, and whose memory a page shows.

The API key is entered once on ``/ui/login``; the ``engram_session`` cookie
then holds a signed session (``shared.apikeys.session_token``: the key's id and
an expiry, ``ui_session_hours``), never the key, and /v1 and /mcp do not accept
it. HTTP-only, SameSite=strict, path ``/ui``, Secure when ``cookie_secure`` is
set. Revoking the key ends its sessions. A user key shows its own user's memory. An admin key
must first pick one user (``engram_user`` cookie, honoured for admin keys only),
so a page always shows exactly one user.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.query.api.auth import Principal
from services.query.api.deps import Pool, settings
from services.query.ui import queries as q
from services.query.ui.web import error_page, is_htmx, render, same_origin
from shared.apikeys import lookup_key, lookup_session, session_token
from shared.embeddings.crypto import signing_key
from shared.embeddings.user_settings import as_embedding_settings

COOKIE_NAME = "engram_session"
USER_COOKIE = "engram_user"
COOKIE_PATH = "/ui"

router = APIRouter()


def _redirect(location: str) -> HTTPException:
    # HX-Redirect makes an HTMX fragment request navigate instead of swapping a page in.
    return HTTPException(
        status.HTTP_303_SEE_OTHER,
        f"see {location}",
        headers={"Location": location, "HX-Redirect": location},
    )


@dataclass(frozen=True)
class Viewer:
    """Who is looking (the key) and the one user whose memory they see."""

    principal: Principal
    user_id: str
    display_name: str | None

    @property
    def is_admin(self) -> bool:
        return self.principal.is_admin


async def ui_principal(request: Request, pool: Pool) -> Principal:
    token = request.cookies.get(COOKIE_NAME)
    key = await lookup_session(pool, token, _signing(request)) if token else None
    if key is None:
        raise _redirect("/ui/login")
    return Principal(key)


async def viewer(
    request: Request, pool: Pool, who: Annotated[Principal, Depends(ui_principal)]
) -> Viewer:
    if who.is_admin:
        chosen = request.cookies.get(USER_COOKIE)
        row = await q.user(pool, chosen) if chosen else None
        if row is None:
            raise _redirect("/ui/users")
        seen = Viewer(who, row["id"], row["display_name"])
    else:
        assert who.user_id is not None
        row = await q.user(pool, who.user_id)
        seen = Viewer(who, who.user_id, row["display_name"] if row else None)
    # what the browser changes, the user's API reads on a replica wait for (replica.py)
    request.state.acting_user = seen.user_id
    return seen


async def admin_principal(who: Annotated[Principal, Depends(ui_principal)]) -> Principal:
    if not who.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only an admin key picks a user")
    return who


ViewerDep = Annotated[Viewer, Depends(viewer)]
AdminDep = Annotated[Principal, Depends(admin_principal)]
SameOrigin = Depends(same_origin)


def _signing(request: Request) -> bytes:
    return signing_key(as_embedding_settings(settings(request)), "ui-session")


def _lifetime_s(request: Request) -> int:
    return int(settings(request).ui_session_hours * 3600)


def _set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        max_age=_lifetime_s(request),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=settings(request).cookie_secure,
    )


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request) -> HTMLResponse:
    return render(request, "login.html", {"error": None})


@router.post("/login", dependencies=[SameOrigin])
async def login(
    request: Request, pool: Pool, key: Annotated[str, Form(max_length=500)] = ""
) -> Response:
    secret = key.strip()
    found = await lookup_key(pool, secret) if secret else None
    if found is None:
        message = "Enter an API key." if not secret else "Unknown or revoked API key."
        return render(
            request, "login.html", {"error": message}, status_code=status.HTTP_401_UNAUTHORIZED
        )
    response = RedirectResponse(
        "/ui/users" if found.is_admin else "/ui/", status_code=status.HTTP_303_SEE_OTHER
    )
    token = session_token(found, _signing(request), _lifetime_s(request))
    _set_cookie(request, response, COOKIE_NAME, token)
    response.delete_cookie(USER_COOKIE, path=COOKIE_PATH)
    return response


@router.post("/logout", dependencies=[SameOrigin])
async def logout() -> Response:
    response = RedirectResponse("/ui/login", status_code=status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE_NAME, path=COOKIE_PATH)
    response.delete_cookie(USER_COOKIE, path=COOKIE_PATH)
    return response


@router.get("/users", response_class=HTMLResponse)
async def pick_user_page(
    request: Request, pool: Pool, who: AdminDep, prefix: str | None = None
) -> HTMLResponse:
    if prefix is not None and len(prefix) > 200:
        return error_page(request, "prefix is longer than 200 characters", status_code=400)
    users = await q.users(pool, prefix)
    name = "_users.html" if is_htmx(request) else "users.html"
    return render(
        request,
        name,
        {"users": users, "prefix": prefix or "", "current": request.cookies.get(USER_COOKIE)},
    )


@router.post("/users", dependencies=[SameOrigin])
async def pick_user(
    request: Request,
    pool: Pool,
    who: AdminDep,
    user_id: Annotated[str, Form(min_length=1, max_length=500)],
) -> Response:
    if await q.user(pool, user_id) is None:
        return error_page(request, f"no user {user_id!r}", status_code=404)
    response = RedirectResponse("/ui/", status_code=status.HTTP_303_SEE_OTHER)
    _set_cookie(request, response, USER_COOKIE, user_id)
    return response
