"""HTTP providers: ``openai`` (any OpenAI-compatible ``/v1/embeddings``) and ``ollama``
(native ``/api/embed``).

One long-lived ``httpx.AsyncClient`` per endpoint (kept by a :class:`ProviderRegistry`),
explicit timeouts, at most ``concurrency`` requests in flight per endpoint, and the
one retry policy and status table of ``shared.provider_http`` (a 429, 502/503/504,
a timeout or a refused connection ends as ``ProviderUnavailable``, try later;
anything else, including a 500 that keeps coming, is ``ProviderError`` carrying the
provider's own message).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from shared.errors import ProviderError
from shared.provider_http import RetryPolicy, post_with_retry


@dataclass(frozen=True)
class HttpOptions:
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    concurrency: int = 4


class HttpEndpoint:
    """One provider base URL: a client, a concurrency limit and the shared retry policy."""

    def __init__(
        self,
        base_url: str,
        *,
        options: HttpOptions,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.options = options
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(options.timeout_s, connect=min(options.timeout_s, 5.0)),
            transport=transport,
            limits=httpx.Limits(max_connections=options.concurrency * 2),
        )
        self._slots = asyncio.Semaphore(options.concurrency)
        self._policy = RetryPolicy(
            retries=options.retries,
            backoff_s=options.backoff_s,
            max_backoff_s=options.max_backoff_s,
        )

    async def post_json(self, path: str, body: dict[str, Any], *, api_key: str | None) -> Any:
        """POST ``body``; the decoded JSON answer (``shared.provider_http`` retries)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        resp = await post_with_retry(
            self._client,
            path,
            body,
            policy=self._policy,
            slots=self._slots,
            label=f"{self.base_url}{path}:",
            headers=headers,
        )
        try:
            return resp.json()
        except json.JSONDecodeError as exc:
            raise ProviderError(f"answer is not JSON: {resp.text[:200]!r}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def _vectors(raw: Any, expected: int) -> list[list[float]]:
    if not isinstance(raw, list) or len(raw) != expected:
        got = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise ProviderError(f"expected {expected} vectors, got {got}")
    out: list[list[float]] = []
    for v in raw:
        if not isinstance(v, list) or not v or not all(isinstance(x, int | float) for x in v):
            raise ProviderError("the answer holds something that is not a vector of numbers")
        out.append([float(x) for x in v])
    return out


class _HttpEmbedder(ABC):
    """What both HTTP shapes share: the endpoint, the model and the request body."""

    provider: str
    path: str

    def __init__(
        self,
        endpoint: HttpEndpoint,
        *,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._model = model
        self._api_key = api_key
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int | None:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        body: dict[str, Any] = {"model": self._model, "input": list(texts)}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        data = await self._endpoint.post_json(self.path, body, api_key=self._api_key)
        return _vectors(self._extract(data), len(texts))

    @abstractmethod
    def _extract(self, data: Any) -> Any:
        """The list of vectors inside the provider's answer."""


class OpenAIEmbedder(_HttpEmbedder):
    """Any OpenAI-compatible ``POST {base}/embeddings`` (base usually ends in ``/v1``)."""

    provider = "openai"
    path = "/embeddings"

    def _extract(self, data: Any) -> Any:
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ProviderError("answer has no 'data' list of embeddings")
        try:
            ordered = sorted(items, key=lambda d: int(d.get("index", 0)))
            return [d["embedding"] for d in ordered]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ProviderError(f"malformed 'data' item: {exc!r}") from exc


class OllamaEmbedder(_HttpEmbedder):
    """Ollama's native ``POST {base}/api/embed`` (``{"model", "input"}`` → ``embeddings``)."""

    provider = "ollama"
    path = "/api/embed"

    def _extract(self, data: Any) -> Any:
        raw = data.get("embeddings") if isinstance(data, dict) else None
        if raw is None:
            raise ProviderError("answer has no 'embeddings'")
        return raw
