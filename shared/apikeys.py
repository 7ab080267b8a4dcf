"""Bearer API keys: created and revoked by operators, checked on every API call.

A key is shown once at creation (``eg_<prefix>_<secret>``); only its SHA-256 is
stored. A user key scopes every call to its user; an admin key has no user and
may act for any user or search across users.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field

import asyncpg

from shared.db import Executor, audit
from shared.embeddings.user_settings import COLUMNS as SETTINGS_COLUMNS
from shared.embeddings.user_settings import Stored
from shared.erasure import ensure_user, refuse_erased
from shared.errors import NotFound

KEY_PREFIX = "eg_"


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
LOOKUP = f"""
SELECT k.id, k.user_id, k.is_admin, k.prefix, k.name, s.user_id IS NOT NULL AS has_settings,
       {", ".join(f"s.{c}" for c in SETTINGS_COLUMNS)}
FROM api_keys k LEFT JOIN embedding_settings s ON s.user_id = k.user_id
WHERE k.key_hash = $1 AND k.revoked_at IS NULL
"""


async def lookup_key(conn: Executor, secret: str) -> ApiKey | None:
    """The live key with this secret, or None (unknown or revoked); a user key comes
    with its user's embedding settings as they are now."""
    row = await conn.fetchrow(LOOKUP, hash_key(secret))
    if row is None:
        return None
    stored = None
    if row["user_id"] is not None:
        stored = Stored({c: row[c] for c in SETTINGS_COLUMNS} if row["has_settings"] else None)
    return ApiKey(row["id"], row["user_id"], row["is_admin"], row["prefix"], row["name"], stored)


async def revoke_key(conn: Executor, prefix: str) -> ApiKey:
    """Revoke the key with this prefix (the 8 hex characters after ``eg_``)."""
    row = await conn.fetchrow(
        """
        UPDATE api_keys SET revoked_at = now()
        WHERE prefix = $1 AND revoked_at IS NULL
        RETURNING id, user_id, is_admin, prefix, name
        """,
        prefix.removeprefix(KEY_PREFIX).split("_")[0],
    )
    if row is None:
        raise NotFound(f"no live key with prefix {prefix!r}")
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
