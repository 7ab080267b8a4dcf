"""Bearer API keys: created and revoked by operators, checked on every API call.

A key is shown once at creation (``eg_<prefix>_<secret>``); only its SHA-256 is
stored. A user key scopes every call to its user; an admin key has no user and
may act for any user or search across users.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import uuid
from dataclasses import dataclass, field

import asyncpg

from shared.db import Executor, audit
from shared.embeddings.user_settings import COLUMNS as SETTINGS_COLUMNS
from shared.embeddings.user_settings import Stored
from shared.erasure import refuse_erased
from shared.errors import InvalidRequest, NotFound
from shared.users import ensure_user

KEY_PREFIX = "eg_"

KEYS_CHANNEL = "engram_api_keys"
"""PostgreSQL ``NOTIFY`` channel told of every key that stops working (revoked, its user
erased), at the commit: the query service's key cache listens on it and forgets."""


@dataclass(frozen=True)
class ApiKey:
    id: uuid.UUID
    user_id: str | None
    is_admin: bool
    prefix: str
    name: str | None
    embedding_settings: Stored | None = field(default=None, repr=False, compare=False)
    """A user key's ``embedding_settings`` row, read with the key by :func:`lookup_key`
    (None: not read, as for an admin key, which acts for users it does not name)."""


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def create_key(
    conn: Executor,
    *,
    user_id: str | None,
    is_admin: bool = False,
    name: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key (and its user, if new); return the key and its secret, shown once.

    Raises :class:`~shared.errors.UserErased` for an erased user."""
    if not is_admin and not user_id:
        raise ValueError("a user key needs a user id")
    prefix = secrets.token_hex(4)
    secret = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(24)}"
    if user_id is not None:
        await refuse_erased(conn, user_id)  # until an admin re-enables the id
        await ensure_user(conn, user_id)
    row = await conn.fetchrow(
        """
        INSERT INTO api_keys (user_id, name, key_hash, prefix, is_admin)
        VALUES ($1, $2, $3, $4, $5)
        RETURNING id
        """,
        user_id,
        name,
        hash_key(secret),
        prefix,
        is_admin,
    )
    assert row is not None
    await audit(
        conn,
        user_id=user_id,
        action="create",
        entity="api_key",
        entity_id=str(row["id"]),
        details={"prefix": prefix, "admin": is_admin},
    )
    return ApiKey(row["id"], user_id, is_admin, prefix, name), secret


# The key and its user's embedding settings in one statement: a search needs both, and
# a second round trip was ~0.1 ms of wall on a quiet machine, milliseconds on a busy one.
_LOOKUP = f"""
SELECT k.id, k.user_id, k.is_admin, k.prefix, k.name, s.user_id IS NOT NULL AS has_settings,
       {", ".join(f"s.{c}" for c in SETTINGS_COLUMNS)}
FROM api_keys k LEFT JOIN embedding_settings s ON s.user_id = k.user_id
WHERE k.revoked_at IS NULL AND
"""
LOOKUP = _LOOKUP + " k.key_hash = $1"
LOOKUP_ID = _LOOKUP + " k.id = $1"


async def lookup_key(conn: Executor, secret: str) -> ApiKey | None:
    """The live key with this secret, or None (unknown or revoked); a user key comes
    with its user's embedding settings as they are now."""
    return await lookup_hashed(conn, hash_key(secret))


async def lookup_hashed(conn: Executor, key_hash: str) -> ApiKey | None:
    """:func:`lookup_key` by the secret's :func:`hash_key`."""
    return _key(await conn.fetchrow(LOOKUP, key_hash))


async def announce_gone(conn: Executor, what: str) -> None:
    """Tell every key cache that keys stopped working (on :data:`KEYS_CHANNEL`, delivered
    when ``conn``'s transaction commits): ``what`` names them for the log only."""
    await conn.execute("SELECT pg_notify($1, $2)", KEYS_CHANNEL, what)


SESSION_VERSION = "s1"


def session_token(key: ApiKey, signing_key: bytes, lifetime_s: float) -> str:
    """A browser session for ``key``: its id and an expiry, signed (HMAC-SHA256). It
    is not the key: ``lookup_key`` (the API, MCP) never accepts it, and it stops
    working at its expiry or when the key is revoked."""
    body = f"{SESSION_VERSION}.{key.id.hex}.{int(time.time() + lifetime_s)}"
    return f"{body}.{_sign(signing_key, body)}"


async def lookup_session(conn: Executor, token: str, signing_key: bytes) -> ApiKey | None:
    """The live key of a browser session token, or None (forged, expired, revoked)."""
    body, _, signature = token.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or parts[0] != SESSION_VERSION:
        return None
    if not hmac.compare_digest(signature, _sign(signing_key, body)):
        return None
    try:
        key_id, expires = uuid.UUID(hex=parts[1]), int(parts[2])
    except ValueError:
        return None
    if expires < time.time():
        return None
    return _key(await conn.fetchrow(LOOKUP_ID, key_id))


def _sign(signing_key: bytes, body: str) -> str:
    digest = hmac.new(signing_key, body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _key(row: asyncpg.Record | None) -> ApiKey | None:
    if row is None:
        return None
    stored = None
    if row["user_id"] is not None:
        stored = Stored({c: row[c] for c in SETTINGS_COLUMNS} if row["has_settings"] else None)
    return ApiKey(row["id"], row["user_id"], row["is_admin"], row["prefix"], row["name"], stored)


async def revoke_key(conn: Executor, prefix: str) -> ApiKey:
    """Revoke the key with this prefix (the 8 hex characters after ``eg_``, or the
    whole key). A prefix that more than one live key has (they are random, so it
    happens) revokes none and names them: revoke by the whole key instead."""
    short = prefix.removeprefix(KEY_PREFIX).split("_")[0]
    whole = prefix.startswith(KEY_PREFIX) and prefix.count("_") >= 2
    live = await conn.fetch(
        """
        SELECT id, user_id, is_admin, name, created_at FROM api_keys
        WHERE revoked_at IS NULL AND (CASE WHEN $2::text IS NULL THEN prefix = $1
                                           ELSE key_hash = $2 END)
        ORDER BY created_at
        """,
        short,
        hash_key(prefix) if whole else None,
    )
    if not live:
        raise NotFound(f"no live key with prefix {short!r}")
    if len(live) > 1:
        named = "; ".join(
            ("admin" if r["is_admin"] else f"user {r['user_id']!r}")
            + (f", {r['name']!r}" if r["name"] else "")
            + f", created {r['created_at']:%Y-%m-%d %H:%M}"
            for r in live
        )
        raise InvalidRequest(
            f"{len(live)} live keys have the prefix {short!r} ({named}); none revoked: "
            "give the whole key"
        )
    row = await conn.fetchrow(
        """
        UPDATE api_keys SET revoked_at = now()
        WHERE id = $1 AND revoked_at IS NULL
        RETURNING id, user_id, is_admin, prefix, name
        """,
        live[0]["id"],
    )
    if row is None:
        raise NotFound(f"no live key with prefix {short!r}")
    await announce_gone(conn, f"key {row['prefix']}")
    await audit(
        conn,
        user_id=row["user_id"],
        action="revoke",
        entity="api_key",
        entity_id=str(row["id"]),
        details={"prefix": row["prefix"]},
    )
    return ApiKey(row["id"], row["user_id"], row["is_admin"], row["prefix"], row["name"])


async def list_keys(conn: Executor) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(
            """
        SELECT prefix, user_id, is_admin, name, created_at, revoked_at
        FROM api_keys ORDER BY created_at
        """
        )
    )
