"""The one retry policy and status table for every call engram makes to a provider
(embeddings in ``shared/embeddings/http.py``, chat completions in ``shared/llm/client.py``).

What an HTTP answer or failure means, in one table (:data:`STATUS`):

| answer                         | within the call        | after the last try      |
|--------------------------------|------------------------|-------------------------|
| 2xx                            | returned               | -                       |
| timeout, refused/reset         | retried with backoff   | ``ProviderUnavailable`` |
| 429, 502, 503, 504             | retried, Retry-After   | ``ProviderUnavailable`` |
| 500 and other 5xx              | retried with backoff   | ``ProviderError``       |
| 4xx other than 429             | not retried            | ``ProviderError``       |

(``Retry-After`` is honoured up to ``max_backoff_s``. A 500 that keeps coming means
the provider keeps refusing this input; another 4xx is a bad key, model or request.)

``ProviderUnavailable`` is retryable: stream consumers wait and try again without
counting it against ``max_attempts``. ``ProviderError`` is permanent: consumers count
attempts and dead-letter (see ``shared/streams.py``).

Backoff: ``backoff_s * 2**(attempt-1)``, capped at ``max_backoff_s``, times a jitter
in [0.75, 1.25).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from shared.errors import ProviderError, ProviderUnavailable

Verdict = Literal["ok", "outage", "retry_then_refuse", "refuse"]

STATUS: dict[int, Verdict] = {429: "outage", 502: "outage", 503: "outage", 504: "outage"}
"""Statuses whose meaning differs from their class (see :func:`verdict`)."""


def verdict(status: int) -> Verdict:
    """What a status means: ok, an outage (retry, then unavailable), a server error
    (retry, then refused) or a refusal (no retry)."""
    if status in STATUS:
        return STATUS[status]
    if 200 <= status < 300:
        return "ok"
    if status >= 500:
        return "retry_then_refuse"
    return "refuse"


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before try number ``attempt + 1`` (``attempt`` >= 1)."""
        base = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
        delay = base * (0.75 + random.random() / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return float(delay)


Observer = Callable[[str], None]
"""Told ``"retry"``, ``"unavailable"`` or ``"error"`` as a call goes (for metrics)."""


async def post_with_retry(
    client: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    *,
    policy: RetryPolicy,
    slots: asyncio.Semaphore,
    label: str,
    headers: dict[str, str] | None = None,
    observe: Observer | None = None,
) -> httpx.Response:
    """POST ``body`` as JSON; the 2xx response, or the error the table above names.

    ``label`` starts every error message (e.g. the endpoint's URL, or ``summary:``)."""
    last = ""
    outage = True
    retry_after: float | None = None
    tries = policy.retries + 1
    for attempt in range(tries):
        if attempt:
            if observe:
                observe("retry")
            await asyncio.sleep(policy.delay(attempt, retry_after))
            retry_after = None
        try:
            async with slots:
                resp = await client.post(path, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            last, outage = f"timed out ({type(exc).__name__})", True
            continue
        except httpx.TransportError as exc:
            last, outage = f"cannot reach the provider: {type(exc).__name__}: {exc}", True
            continue
        v = verdict(resp.status_code)
        if v == "ok":
            return resp
        last = f"HTTP {resp.status_code}: {error_message(resp)}"
        if v == "refuse":
            if observe:
                observe("error")
            raise ProviderError(f"{label} {last}")
        outage = v == "outage"
        retry_after = _retry_after(resp)
    if observe:
        observe("unavailable" if outage else "error")
    error = ProviderUnavailable if outage else ProviderError
    raise error(f"{label} {last} (after {tries} attempts)")


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def error_message(resp: httpx.Response) -> str:
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
