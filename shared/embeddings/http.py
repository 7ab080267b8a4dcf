"""HTTP providers: ``openai`` (any OpenAI-compatible ``/v1/embeddings``) and ``ollama``
(native ``/api/embed``).

One long-lived ``httpx.AsyncClient`` per endpoint (kept by a :class:`ProviderRegistry`),
explicit timeouts, at most ``concurrency`` requests in flight per endpoint, and
retries with exponential backoff only on timeouts, connection failures, 429 and
5xx. After the retries a 429, 502/503/504, a timeout or a refused connection is
``ProviderUnavailable`` (try later); anything else, including a 500 that keeps
coming, is ``ProviderError`` carrying the provider's own message.
"""

from __future__ import annotations

import asyncio
import json
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from shared.errors import ProviderError, ProviderUnavailable

UNAVAILABLE_STATUS = {429, 502, 503, 504}


@dataclass(frozen=True)
class HttpOptions:
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    concurrency: int = 4


class HttpEndpoint:
    """One provider base URL: a client, a concurrency limit and the retry policy."""

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

    async def post_json(self, path: str, body: dict[str, Any], *, api_key: str | None) -> Any:
        """POST ``body``; the decoded JSON answer. Retries as described in the module doc."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        last: str = ""
        unavailable = True
        retry_after: float | None = None
        for attempt in range(self.options.retries + 1):
            if attempt:
                await asyncio.sleep(self._delay(attempt, retry_after))
                retry_after = None
            try:
                async with self._slots:
                    resp = await self._client.post(path, json=body, headers=headers)
            except httpx.TimeoutException as exc:
                last, unavailable = f"timed out after {self.options.timeout_s:g} s ({exc!r})", True
                continue
            except httpx.TransportError as exc:
                last, unavailable = f"cannot reach {self.base_url}: {exc!r}", True
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {_message(resp)}"
                unavailable = resp.status_code in UNAVAILABLE_STATUS
                retry_after = _retry_after(resp)
                continue
            if resp.status_code >= 400:
                raise ProviderError(f"HTTP {resp.status_code}: {_message(resp)}")
            try:
                return resp.json()
            except json.JSONDecodeError as exc:
                raise ProviderError(f"answer is not JSON: {resp.text[:200]!r}") from exc
        tries = self.options.retries + 1
        error = ProviderUnavailable if unavailable else ProviderError
        raise error(f"{self.base_url}{path}: {last} (after {tries} attempts)")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        base = self.options.backoff_s * 2 ** (attempt - 1)
        delay = min(base, self.options.max_backoff_s) * (0.75 + random.random() / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.options.max_backoff_s))
        return float(delay)

    async def aclose(self) -> None:
        await self._client.aclose()


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _message(resp: httpx.Response) -> str:
    """The provider's error text: OpenAI's ``error.message``, Ollama's ``error``, or the body."""
    try:
        data = resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return resp.text[:500] or resp.reason_phrase
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return resp.text[:500]


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
