"""Provider configurations and the process's registry of provider clients."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import httpx
from pydantic import SecretStr

from shared.embeddings import local
from shared.embeddings.base import Embedder
from shared.embeddings.http import HttpEndpoint, HttpOptions, OllamaEmbedder, OpenAIEmbedder
from shared.embeddings.local import LocalEmbedder
from shared.embeddings.settings import EmbeddingSettings
from shared.errors import ConfigError
from shared.outbound import PinnedTransport


@dataclass(frozen=True)
class ProviderConfig:
    """Which model embeds a user's texts. ``key`` identifies it for batching and rebuilds."""

    provider: str
    model: str
    endpoint_url: str | None = None
    api_key: SecretStr | None = None
    dimensions: int | None = None
    source: str = "system"  # 'system' or 'user'

    @property
    def key(self) -> tuple[str, str, str | None, int | None, str | None]:
        secret = self.api_key.get_secret_value() if self.api_key else None
        return (self.provider, self.model, self.endpoint_url, self.dimensions, secret)


def system_config(settings: EmbeddingSettings) -> ProviderConfig | None:
    """The deployment's provider, or None when ``ENGRAM_EMBEDDING_PROVIDER=none``."""
    if settings.embedding_provider == "none":
        return None
    if settings.embedding_provider != "local" and not settings.embedding_url:
        raise ConfigError(
            f"ENGRAM_EMBEDDING_PROVIDER={settings.embedding_provider} needs ENGRAM_EMBEDDING_URL"
        )
    return ProviderConfig(
        provider=settings.embedding_provider,
        model=settings.embedding_model,
        endpoint_url=settings.embedding_url,
        api_key=settings.embedding_api_key,
        dimensions=settings.embedding_dimensions,
        source="system",
    )


def preload(settings: EmbeddingSettings) -> None:
    """Blocking: load the system provider's local model now (exporting the int8 file
    if it is not cached yet), so the first text or query does not wait for it."""
    if settings.embedding_provider == "local":
        local.load_model(settings.embedding_model)


MAX_USER_ENDPOINTS = 256
"""Users' endpoints kept, the least recently used dropped first: a user who changes
their URL every few seconds made one client per URL, kept for good."""


class ProviderRegistry:
    """One long-lived HTTP endpoint (client + limits) per base URL; close it at shutdown.

    A user's endpoint is called through ``shared.outbound.PinnedTransport``: every
    request checked against ``allow`` and sent to the address checked. Users'
    endpoints share one connection pool, so one dropped beyond
    ``MAX_USER_ENDPOINTS`` holds no connection (a call still in flight keeps it)."""

    def __init__(
        self,
        options: HttpOptions | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        local_batch: int = 64,
        allow: str = "",
    ) -> None:
        self.options = options or HttpOptions()
        self._transport = transport
        self._local_batch = local_batch
        self._allow = allow
        self._endpoints: OrderedDict[tuple[str, bool], HttpEndpoint] = OrderedDict()
        # one connection pool under every user endpoint's guard (keyed by the pinned
        # address): a new transport costs an SSL context, ~50 ms of the event loop,
        # and a user who changes their URL every few seconds made one each time
        self._checked_inner: httpx.AsyncBaseTransport | None = None

    @classmethod
    def from_settings(
        cls, settings: EmbeddingSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> ProviderRegistry:
        local.configure(
            workers=settings.embedding_local_workers,
            threads=settings.embedding_local_threads,
            cache_dir=settings.data_dir / "models",
        )
        return cls(
            HttpOptions(
                timeout_s=settings.embedding_timeout_s,
                retries=settings.embedding_retries,
                backoff_s=settings.embedding_backoff_s,
                concurrency=settings.embedding_concurrency,
            ),
            transport=transport,
            local_batch=settings.embedding_local_batch,
            allow=settings.embedding_endpoint_allow,
        )

    def endpoint(self, base_url: str, *, checked: bool = False) -> HttpEndpoint:
        """The client of ``base_url``; ``checked``: a user's, through the outbound guard."""
        base = base_url.rstrip("/")
        found = self._endpoints.get((base, checked))
        if found is not None:
            self._endpoints.move_to_end((base, checked))
        else:
            transport = self._transport
            if checked:
                if self._checked_inner is None:
                    self._checked_inner = self._transport or httpx.AsyncHTTPTransport()
                transport = PinnedTransport(self._allow, self._checked_inner, owns_inner=False)
            found = HttpEndpoint(base, options=self.options, transport=transport)
            self._endpoints[(base, checked)] = found
            if checked and self.user_endpoints > MAX_USER_ENDPOINTS:
                oldest = next(k for k in self._endpoints if k[1])
                del self._endpoints[oldest]  # its connections are the shared pool's
        return found

    @property
    def user_endpoints(self) -> int:
        """Users' endpoints kept now (at most ``MAX_USER_ENDPOINTS``)."""
        return sum(1 for _, checked in self._endpoints if checked)

    def embedder(self, config: ProviderConfig) -> Embedder:
        if config.provider == "local":
            return LocalEmbedder(model=config.model, batch_size=self._local_batch)
        if not config.endpoint_url:
            raise ConfigError(f"the {config.provider} provider needs an endpoint URL")
        api_key = config.api_key.get_secret_value() if config.api_key else None
        endpoint = self.endpoint(config.endpoint_url, checked=config.source == "user")
        if config.provider == "openai":
            return OpenAIEmbedder(
                endpoint, model=config.model, api_key=api_key, dimensions=config.dimensions
            )
        if config.provider == "ollama":
            return OllamaEmbedder(
                endpoint, model=config.model, api_key=api_key, dimensions=config.dimensions
            )
        raise ConfigError(f"unknown embedding provider {config.provider!r}")

    async def aclose(self) -> None:
        for endpoint in self._endpoints.values():
            await endpoint.aclose()
        self._endpoints.clear()
        if self._checked_inner is not None and self._checked_inner is not self._transport:
            await self._checked_inner.aclose()
        self._checked_inner = None


_default: ProviderRegistry | None = None


def default_registry(settings: EmbeddingSettings) -> ProviderRegistry:
    """The process-wide registry, made on first use (a service closes it in its lifespan)."""
    global _default
    if _default is None:
        _default = ProviderRegistry.from_settings(settings)
    return _default


async def close_default_registry() -> None:
    global _default
    if _default is not None:
        await _default.aclose()
        _default = None
