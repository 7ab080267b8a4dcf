"""Per-user provider settings (table ``embedding_settings``) and choosing a user's embedder.

Read on each call, so a change applies at once: by ``resolve_config``, or in the
same statement as the caller's API key (``shared.apikeys.lookup_key``, one round
trip for both), handed over as :class:`Stored`. Precedence (Nova 3.1.3):

1. a user who turned embeddings off gets none (full-text-only);
2. the system provider (``ENGRAM_EMBEDDING_PROVIDER``, default ``local``), unless
   ``ENGRAM_EMBEDDING_USER_OVERRIDE`` lets a user's own endpoint win;
3. else the user's own endpoint;
4. else None: full-text-only mode.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple

import asyncpg
from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_core import PydanticCustomError

from shared.db import Executor
from shared.embeddings import crypto
from shared.embeddings.base import Embedder
from shared.embeddings.local import MODELS as LOCAL_MODELS
from shared.embeddings.outbound import check_endpoint, public_reason
from shared.embeddings.providers import (
    ProviderConfig,
    ProviderRegistry,
    default_registry,
    system_config,
)
from shared.embeddings.settings import EmbeddingSettings
from shared.erasure import ensure_user
from shared.errors import ConfigError, ProviderError
from shared.settings import CommonSettings

COLUMNS = (
    "enabled",
    "provider",
    "endpoint_url",
    "model",
    "api_key_enc",
    "dimensions",
    "updated_at",
)

GET_SETTINGS = f"""
SELECT {", ".join(COLUMNS)}
FROM embedding_settings WHERE user_id = $1
"""

GET_SETTINGS_MANY = """
SELECT user_id, enabled, provider, endpoint_url, model, api_key_enc, dimensions, updated_at
FROM embedding_settings WHERE user_id = ANY($1::text[])
"""


PUT_SETTINGS = """
INSERT INTO embedding_settings (user_id, enabled, provider, endpoint_url, model, api_key_enc,
                                dimensions, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (user_id) DO UPDATE SET
    enabled = EXCLUDED.enabled, provider = EXCLUDED.provider,
    endpoint_url = EXCLUDED.endpoint_url, model = EXCLUDED.model,
    api_key_enc = CASE WHEN $8 THEN EXCLUDED.api_key_enc ELSE embedding_settings.api_key_enc END,
    dimensions = EXCLUDED.dimensions, updated_at = now()
"""

DELETE_SETTINGS = "DELETE FROM embedding_settings WHERE user_id = $1"


class ProviderSettingsIn(BaseModel):
    """What a user may set. ``api_key``: omitted keeps the stored one, ``""`` removes it."""

    enabled: bool = True
    provider: Literal["local", "openai", "ollama"]
    endpoint_url: str | None = Field(
        default=None,
        description="base URL, e.g. http://host:8080/v1 (openai) or http://host:11434 (ollama)",
    )
    model: str = Field(min_length=1, max_length=200)
    api_key: SecretStr | None = None
    dimensions: int | None = Field(default=None, ge=1, le=16000)

    @model_validator(mode="after")
    def _coherent(self) -> ProviderSettingsIn:
        # PydanticCustomError (not ValueError) keeps the error JSON-serialisable in a 422.
        if self.provider == "local":
            if self.model not in LOCAL_MODELS:
                raise PydanticCustomError(
                    "provider_settings",
                    "the local provider runs {models}",
                    {"models": " or ".join(LOCAL_MODELS)},
                )
            if self.endpoint_url:
                raise PydanticCustomError(
                    "provider_settings", "the local provider takes no endpoint_url"
                )
        else:
            if not self.endpoint_url:
                raise PydanticCustomError(
                    "provider_settings",
                    "the {provider} provider needs endpoint_url",
                    {"provider": self.provider},
                )
            if not self.endpoint_url.startswith(("http://", "https://")):
                raise PydanticCustomError(
                    "provider_settings", "endpoint_url must start with http:// or https://"
                )
        return self


class ProviderSettingsOut(BaseModel):
    """A user's stored settings (never the key itself) and what is in effect for them."""

    stored: bool
    enabled: bool
    provider: str | None
    endpoint_url: str | None
    model: str | None
    dimensions: int | None
    has_api_key: bool
    updated_at: datetime | None
    effective_provider: str | None = Field(description="None = full-text-only mode")
    effective_model: str | None
    effective_source: str | None = Field(description="system or user")


def as_embedding_settings(settings: CommonSettings) -> EmbeddingSettings:
    """Services whose settings class is not an EmbeddingSettings still get the system
    default from ``ENGRAM_EMBEDDING_*`` (their own values are kept)."""
    if isinstance(settings, EmbeddingSettings):
        return settings
    cached = _coerced.get(id(settings))
    if cached is not None and cached[0] is settings:
        return cached[1]
    made = EmbeddingSettings(**settings.model_dump())
    _coerced[id(settings)] = (settings, made)
    return made


_coerced: dict[int, tuple[CommonSettings, EmbeddingSettings]] = {}


Row = Mapping[str, Any] | asyncpg.Record
"""A settings row: as read by ``GET_SETTINGS``, or its columns out of a wider one."""


class Stored(NamedTuple):
    """A user's settings row as already read in this request (``row`` None: they have
    none), so resolving their embedder reads nothing more."""

    row: Row | None


def _user_config(settings: EmbeddingSettings, row: Row) -> ProviderConfig:
    key = row["api_key_enc"]
    return ProviderConfig(
        provider=row["provider"],
        model=row["model"],
        endpoint_url=row["endpoint_url"],
        api_key=SecretStr(crypto.decrypt(settings, bytes(key))) if key else None,
        dimensions=row["dimensions"],
        source="user",
    )


def choose(settings: EmbeddingSettings, row: Row | None) -> ProviderConfig | None:
    """The precedence rule on an already-read settings row."""
    if row is not None and not row["enabled"]:
        return None
    system = system_config(settings)
    if row is not None and (system is None or settings.embedding_user_override):
        return _user_config(settings, row)
    return system


async def resolve_config(
    pool: Executor, user_id: str, settings: CommonSettings, *, stored: Stored | None = None
) -> ProviderConfig | None:
    """The provider configuration in effect for ``user_id`` now (None = full-text-only);
    ``stored``: their row as already read in this request (else it is read here)."""
    s = as_embedding_settings(settings)
    row = stored.row if stored is not None else await pool.fetchrow(GET_SETTINGS, user_id)
    return choose(s, row)


async def resolve_configs(
    pool: Executor, user_ids: Sequence[str], settings: CommonSettings
) -> dict[str, ProviderConfig | None | ConfigError]:
    """``resolve_config`` for many users in one read: each user's configuration, None
    (full-text-only), or the ConfigError that makes theirs unusable right now."""
    s = as_embedding_settings(settings)
    rows = {r["user_id"]: r for r in await pool.fetch(GET_SETTINGS_MANY, list(user_ids))}
    out: dict[str, ProviderConfig | None | ConfigError] = {}
    for user_id in user_ids:
        try:
            out[user_id] = await allowed(choose(s, rows.get(user_id)), s)
        except ConfigError as exc:
            out[user_id] = exc
    return out


async def allowed(
    config: ProviderConfig | None, settings: EmbeddingSettings
) -> ProviderConfig | None:
    """``config``, once its endpoint is one the server may call (a user's own endpoint is
    checked, ``shared.embeddings.outbound``); raises ``EndpointRefused``."""
    if config is not None and config.source == "user" and config.endpoint_url:
        await check_endpoint(config.endpoint_url, settings.embedding_endpoint_allow)
    return config


async def resolve_embedder(
    pool: Executor,
    user_id: str,
    settings: CommonSettings,
    *,
    registry: ProviderRegistry | None = None,
    stored: Stored | None = None,
) -> Embedder | None:
    """The embedder for ``user_id``'s texts and queries, or None for full-text-only mode.

    Reads the user's settings on every call (unless given as ``stored``). Vectors it
    returns still need ``fit_to_column(v, settings.embedding_dim)`` before they meet
    the database, and
    a search should only compare with rows whose ``embedding_provider`` /
    ``embedding_model`` equal this embedder's ``provider`` / ``model``."""
    s = as_embedding_settings(settings)
    config = await allowed(await resolve_config(pool, user_id, s, stored=stored), s)
    if config is None:
        return None
    return (registry or default_registry(s)).embedder(config)


async def get_provider_settings(
    pool: asyncpg.Pool, user_id: str, settings: CommonSettings
) -> ProviderSettingsOut:
    s = as_embedding_settings(settings)
    row = await pool.fetchrow(GET_SETTINGS, user_id)
    effective = choose(s, row)
    return ProviderSettingsOut(
        stored=row is not None,
        enabled=row["enabled"] if row is not None else True,
        provider=row["provider"] if row is not None else None,
        endpoint_url=row["endpoint_url"] if row is not None else None,
        model=row["model"] if row is not None else None,
        dimensions=row["dimensions"] if row is not None else None,
        has_api_key=bool(row is not None and row["api_key_enc"]),
        updated_at=row["updated_at"] if row is not None else None,
        effective_provider=effective.provider if effective else None,
        effective_model=effective.model if effective else None,
        effective_source=effective.source if effective else None,
    )


async def put_provider_settings(
    pool: asyncpg.Pool, user_id: str, new: ProviderSettingsIn, settings: CommonSettings
) -> ProviderSettingsOut:
    """Store a user's settings (the API key encrypted). Starting a rebuild is the caller's
    next step (``shared.embeddings.rebuild``), after showing how many rows it touches."""
    s = as_embedding_settings(settings)
    if new.endpoint_url:
        await check_endpoint(new.endpoint_url, s.embedding_endpoint_allow)
    replace_key = new.api_key is not None
    key_value = new.api_key.get_secret_value() if new.api_key is not None else ""
    key_enc = crypto.encrypt(s, key_value) if key_value else None
    async with pool.acquire() as conn, conn.transaction():
        await ensure_user(conn, user_id)
        await conn.execute(
            PUT_SETTINGS,
            user_id,
            new.enabled,
            new.provider,
            new.endpoint_url,
            new.model,
            key_enc,
            new.dimensions,
            replace_key,
        )
    return await get_provider_settings(pool, user_id, s)


async def delete_provider_settings(
    pool: asyncpg.Pool, user_id: str, settings: CommonSettings
) -> ProviderSettingsOut:
    await pool.execute(DELETE_SETTINGS, user_id)
    return await get_provider_settings(pool, user_id, settings)


class ProbeResult(BaseModel):
    """Outcome of embedding a probe text with a provider configuration."""

    ok: bool
    provider: str
    model: str
    dimensions: int | None = None
    latency_ms: float | None = None
    fits_column: bool | None = Field(
        default=None, description="whether the vector fits ENGRAM_EMBEDDING_DIM"
    )
    error: str | None = None


PROBE_TEXT = "engram embedding probe: the quick brown fox jumps over the lazy dog"


async def probe_endpoint(
    config: ProviderConfig, settings: CommonSettings, *, registry: ProviderRegistry | None = None
) -> ProbeResult:
    """Embed a probe text; report dimensions and latency, or what kind of failure it was
    (for a user's endpoint never the remote body). A user's endpoint the deployment
    does not allow raises ``EndpointRefused`` before any call."""
    s = as_embedding_settings(settings)
    await allowed(config, s)
    embedder = (registry or default_registry(s)).embedder(config)
    started = time.perf_counter()
    try:
        [vector] = await embedder.embed([PROBE_TEXT])
    except ProviderError as exc:
        error = public_reason(exc) if config.source == "user" else str(exc)
        return ProbeResult(ok=False, provider=config.provider, model=config.model, error=error)
    latency = (time.perf_counter() - started) * 1000
    return ProbeResult(
        ok=True,
        provider=config.provider,
        model=config.model,
        dimensions=len(vector),
        latency_ms=round(latency, 1),
        fits_column=len(vector) <= s.embedding_dim,
    )


def config_from_input(
    new: ProviderSettingsIn, *, stored_key: SecretStr | None = None
) -> ProviderConfig:
    """A configuration to probe before saving (``api_key`` omitted = the stored one)."""
    key = new.api_key if new.api_key is not None else stored_key
    return ProviderConfig(
        provider=new.provider,
        model=new.model,
        endpoint_url=new.endpoint_url,
        api_key=key if key is not None and key.get_secret_value() else None,
        dimensions=new.dimensions,
        source="user",
    )


async def stored_api_key(
    pool: asyncpg.Pool, user_id: str, settings: CommonSettings
) -> SecretStr | None:
    row = await pool.fetchrow(GET_SETTINGS, user_id)
    if row is None or not row["api_key_enc"]:
        return None
    return SecretStr(crypto.decrypt(as_embedding_settings(settings), bytes(row["api_key_enc"])))
