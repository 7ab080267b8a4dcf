"""Embeddings: providers behind one ``Embedder`` interface, per-user settings, rebuild.

For callers (the query service, the CLI, the embedder service):

- ``resolve_embedder(pool, user_id, settings)`` → ``Embedder | None`` (None =
  full-text-only mode); ``await embedder.embed([query])`` → one vector;
  ``fit_to_column(vector, settings.embedding_dim)`` before comparing in SQL.
- ``get/put_provider_settings``, ``probe_endpoint``: the settings API.
- ``shared.embeddings.rebuild``: rebuild-total and backfill.
"""

from shared.embeddings.base import DimensionTooLarge, Embedder, fit_to_column
from shared.embeddings.providers import ProviderConfig, ProviderRegistry, close_default_registry
from shared.embeddings.settings import EmbeddingSettings
from shared.embeddings.user_settings import (
    ProbeResult,
    ProviderSettingsIn,
    ProviderSettingsOut,
    config_from_input,
    delete_provider_settings,
    get_provider_settings,
    probe_endpoint,
    put_provider_settings,
    resolve_config,
    resolve_embedder,
)

__all__ = [
    "DimensionTooLarge",
    "Embedder",
    "EmbeddingSettings",
    "ProbeResult",
    "ProviderConfig",
    "ProviderRegistry",
    "ProviderSettingsIn",
    "ProviderSettingsOut",
    "close_default_registry",
    "config_from_input",
    "delete_provider_settings",
    "fit_to_column",
    "get_provider_settings",
    "put_provider_settings",
    "resolve_config",
    "resolve_embedder",
    "probe_endpoint",
]
