"""A user's embedding provider change (Nova 3.1.3, 3.2.7), decided in one place for
``PUT /v1/embeddings/settings`` and the browser's settings page.

:func:`plan` answers what storing ``new`` would do: the provider in effect before
and after (the precedence rule, ``shared.embeddings.user_settings.precedence``),
whether that is a change of provider or model (then every stored vector must be
rebuilt) and how many rows a rebuild touches. A change to a new endpoint is
probed first (:func:`probe_new_endpoint`); the page asks to confirm a rebuild
(:attr:`ProviderChange.needs_confirmation`); :func:`apply` stores the settings
and, when asked, starts the rebuild.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from shared.embeddings import (
    ProbeResult,
    ProviderConfig,
    ProviderSettingsIn,
    ProviderSettingsOut,
    config_from_input,
    probe_endpoint,
    put_provider_settings,
    resolve_config,
)
from shared.embeddings.rebuild import RebuildCount, RebuildStatus, rebuild_count, start_rebuild
from shared.embeddings.user_settings import as_embedding_settings, precedence, stored_api_key
from shared.settings import CommonSettings
from shared.streams import Publisher


def identity(config: ProviderConfig | None) -> tuple[str, str, str | None, int | None] | None:
    """What makes stored vectors comparable: provider, model, endpoint, dimensions."""
    if config is None:
        return None
    return (config.provider, config.model, config.endpoint_url, config.dimensions)


@dataclass(frozen=True)
class ProviderChange:
    before: ProviderConfig | None
    """In effect now (None: full-text-only)."""
    after: ProviderConfig | None
    """In effect once the new settings are stored."""
    count: RebuildCount
    """The rows a rebuild would re-embed."""

    @property
    def rebuild_needed(self) -> bool:
        """A provider or model takes effect that differs from the one in effect now."""
        return self.after is not None and identity(self.before) != identity(self.after)

    @property
    def needs_confirmation(self) -> bool:
        """A rebuild that would touch stored rows: the person confirms it first."""
        return self.rebuild_needed and self.count.total > 0

    @property
    def new_endpoint(self) -> ProviderConfig | None:
        """The configuration to probe before storing: a change to an HTTP endpoint."""
        if self.rebuild_needed and self.after is not None and self.after.endpoint_url:
            return self.after
        return None


async def plan(
    pool: asyncpg.Pool, user_id: str, new: ProviderSettingsIn, settings: CommonSettings
) -> ProviderChange:
    """What storing ``new`` for ``user_id`` would change; nothing is written."""
    stored_key = await stored_api_key(pool, user_id, settings, new.endpoint_url)
    after = precedence(
        as_embedding_settings(settings),
        enabled=new.enabled,
        user=lambda: config_from_input(new, stored_key=stored_key),
    )
    return ProviderChange(
        before=await resolve_config(pool, user_id, settings),
        after=after,
        count=await rebuild_count(pool, user_id),
    )


async def probe_new_endpoint(
    change: ProviderChange, settings: CommonSettings
) -> ProbeResult | None:
    """Embed a probe text with the new endpoint (None: no new endpoint to try).
    Raises ``EndpointRefused`` for an address this deployment does not call."""
    config = change.new_endpoint
    return None if config is None else await probe_endpoint(config, settings)


@dataclass(frozen=True)
class Applied:
    saved: ProviderSettingsOut
    rebuild: RebuildStatus | None
    """The rebuild started, if one was asked for and needed."""


async def apply(
    pool: asyncpg.Pool,
    publisher: Publisher,
    user_id: str,
    new: ProviderSettingsIn,
    settings: CommonSettings,
    *,
    change: ProviderChange,
    start_rebuild_now: bool,
) -> Applied:
    """Store ``new`` (``EndpointRefused`` for a refused endpoint); with
    ``start_rebuild_now``, start the rebuild the change needs."""
    saved = await put_provider_settings(pool, user_id, new, settings)
    rebuild = None
    if start_rebuild_now and change.needs_confirmation:
        rebuild = await start_rebuild(pool, user_id, settings, publisher=publisher)
    return Applied(saved=saved, rebuild=rebuild)
