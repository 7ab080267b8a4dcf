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

A key is looked up in PostgreSQL once and then kept in the process's
:class:`KeyCache` for a few seconds, which every call's :func:`principal` reads
(one round trip less per call). A key that stops working (revoked, its user
erased) is forgotten by every query process when PostgreSQL tells them
(``shared.apikeys.KEYS_CHANNEL``, at the commit), and a process not listening
caches nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, replace
from typing import Annotated

import asyncpg
from fastapi import Depends, FastAPI, HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shared.apikeys import KEYS_CHANNEL, ApiKey, hash_key, lookup_hashed
from shared.db import connect
from shared.embeddings.user_settings import Stored
from shared.erasure import refuse_erased
from shared.errors import InfrastructureError, UserErased
from shared.runtime import Runtime

log = logging.getLogger(__name__)

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


class KeyCache:
    """Live API keys by the hash of their secret, each kept ``ttl_s`` seconds.

    Revocation: any key that stops working clears the cache of every process as soon
    as PostgreSQL delivers the ``NOTIFY`` its writer sends at the commit
    (``shared.apikeys.announce_gone``; milliseconds); the process that erases a user
    clears its own before it answers. Keys are cached only while this process
    listens (a lost connection clears the cache and stops caching until it is back),
    and a lookup that was under way when a notification came is not kept. What
    PostgreSQL cannot announce (a key revoked by hand in SQL) takes effect within
    ``ttl_s``. Unknown keys are not cached. A cached key carries no embedding
    settings (None: the resolver reads them, as for any key read without them)."""

    def __init__(self, ttl_s: float, *, max_keys: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self._keys: dict[str, tuple[float, ApiKey]] = {}
        self._generation = 0
        self._listener: asyncpg.Connection | None = None

    @property
    def listening(self) -> bool:
        return self._listener is not None and not self._listener.is_closed()

    async def lookup(self, pool: asyncpg.Pool, secret: str) -> ApiKey | None:
        """The live key with this secret (``shared.apikeys.lookup_key``), or None."""
        digest = hash_key(secret)
        now = time.monotonic()
        if self.listening:
            hit = self._keys.get(digest)
            if hit is not None and hit[0] > now:
                return hit[1]
        generation = self._generation
        key = await lookup_hashed(pool, digest)
        if key is not None and self.listening and generation == self._generation:
            if len(self._keys) >= self.max_keys:
                self._keys.clear()
            self._keys[digest] = (now + self.ttl_s, replace(key, embedding_settings=None))
        return key

    def forget(self, *_: object) -> None:
        """Forget every key (and any lookup under way)."""
        self._generation += 1
        self._keys.clear()

    async def listen(self, rt: Runtime) -> None:
        """Listen on ``KEYS_CHANNEL`` unless already listening (periodic: reconnects)."""
        if self.ttl_s <= 0 or self.listening:
            return
        self.forget()
        self._listener = None
        with contextlib.suppress(InfrastructureError, OSError, asyncpg.PostgresError):
            conn = await connect(rt.settings.require_database_url(), codecs=False)
            try:
                await conn.add_listener(KEYS_CHANNEL, self.forget)
            except BaseException:
                await conn.close()
                raise
            conn.add_termination_listener(self.forget)
            self._listener = conn

    async def close(self, _rt: Runtime | None = None) -> None:
        conn, self._listener = self._listener, None
        self.forget()
        if conn is not None and not conn.is_closed():
            await conn.close()

    def install(self, app: FastAPI, rt: Runtime) -> None:
        """The app's key cache, listening while ``rt`` runs (reconnecting every second)."""
        app.state.key_cache = self
        rt.on_start.append(self.listen)
        rt.every(1.0, lambda: self.listen(rt))
        rt.on_stop.append(self.close)


def forget_keys(app: FastAPI) -> None:
    """Clear the app's key cache now (after erasing a user in this process)."""
    cache: KeyCache | None = getattr(app.state, "key_cache", None)
    if cache is not None:
        cache.forget()


async def _lookup(request: Request, secret: str) -> ApiKey | None:
    pool = request.app.state.runtime.pool
    cache: KeyCache | None = getattr(request.app.state, "key_cache", None)
    if cache is None:
        return await lookup_hashed(pool, hash_key(secret))
    return await cache.lookup(pool, secret)


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
    key = await _lookup(request, secret)
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
