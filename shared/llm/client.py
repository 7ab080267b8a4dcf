"""An OpenAI-compatible chat-completions client that returns validated pydantic models.

What a caller may rely on:

- ``complete_json`` returns an instance of the asked-for model or raises;
- output that is not valid JSON for the model is asked for again (with the
  validation error) up to ``invalid_retries`` times, then
  :class:`~shared.errors.InvalidModelOutput` is raised;
- HTTP failures follow the one policy and status table of ``shared.provider_http``:
  timeouts, connection errors, 429 and 502-504 are retried with backoff, then
  :class:`ProviderUnavailable` (an outage); a 500 that keeps coming is
  :class:`ProviderError`; other 4xx answers raise :class:`ProviderError` at once
  (a configuration problem such as a bad key);
- every request goes through the endpoint's guard (``shared.guard``): a circuit
  (3 unavailable outcomes in a row fail the next calls at once for a cooldown), a
  deadline on the whole call (``llm_deadline_s``, retries included) and an inline
  wait (``llm_inline_s``): a call not answered by then goes on out of line and
  :class:`ProviderUnavailable` is raised at once, as it is for every call to the
  endpoint while that one is in flight;
- with ``json_schema`` set the request carries the asked-for model's JSON schema
  (:func:`response_format`) so a server with constrained decoding answers in that
  shape; the answer is validated all the same;
- token usage reported by the server is added to ``engram_llm_tokens_total``
  and to :attr:`OpenAIChatModel.usage`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import httpx
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ValidationError

from shared.errors import InvalidModelOutput, ProviderError
from shared.guard import Guards
from shared.llm.settings import LLMSettings, SchemaFormat
from shared.provider_http import RetryPolicy, post_with_retry

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


class ChatModel(Protocol):
    """A chat model that answers with JSON matching a pydantic model."""

    @property
    def name(self) -> str: ...

    async def complete_json(
        self, *, system: str, user: str, schema: type[M], purpose: str
    ) -> M: ...


@dataclass
class Usage:
    """Tokens reported by the server, summed over this client's life."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    by_purpose: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMMetrics:
    """Language-model metrics on a service's registry (labels: purpose, kind, outcome)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tokens = Counter(
            "engram_llm_tokens_total",
            "Tokens used by language-model calls",
            ["purpose", "kind"],
            registry=registry,
        )
        self.requests = Counter(
            "engram_llm_requests_total",
            "Language-model requests by outcome",
            ["purpose", "outcome"],
            registry=registry,
        )


class OpenAIChatModel:
    """``POST {base_url}/chat/completions`` over one long-lived ``httpx.AsyncClient``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        invalid_retries: int = 2,
        concurrency: int = 4,
        json_mode: bool = True,
        json_schema: SchemaFormat = "off",
        max_tokens: int | None = None,
        metrics: LLMMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff_base_s: float = 0.5,
        guards: Guards | None = None,
        deadline_s: float = 150.0,
        inline_s: float = 60.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            transport=transport,
        )
        self._model = model
        self._policy = RetryPolicy(retries=max_retries, backoff_s=backoff_base_s)
        self._invalid_retries = invalid_retries
        self._json_mode = json_mode
        self._json_schema = json_schema
        self._max_tokens = max_tokens
        self._metrics = metrics
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._key = base_url.rstrip("/")
        self.guards = guards or Guards()
        self._deadline_s = deadline_s
        self._inline_s = inline_s
        self.usage = Usage()

    @classmethod
    def from_settings(
        cls,
        settings: LLMSettings,
        *,
        metrics: LLMMetrics | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> OpenAIChatModel:
        assert settings.llm_base_url and settings.llm_model, "no language model configured"
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key=key,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            invalid_retries=settings.llm_invalid_retries,
            concurrency=settings.llm_concurrency,
            json_mode=settings.llm_json_mode,
            json_schema=settings.llm_json_schema,
            max_tokens=settings.llm_max_tokens,
            metrics=metrics,
            transport=transport,
            deadline_s=settings.llm_deadline_s,
            inline_s=settings.llm_inline_s,
        )

    @property
    def name(self) -> str:
        return self._model

    async def aclose(self) -> None:
        await self.guards.aclose()  # calls out of line end with the client
        await self._client.aclose()

    async def complete_json(self, *, system: str, user: str, schema: type[M], purpose: str) -> M:
        messages: list[dict[str, str]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        last_error = ""
        for attempt in range(self._invalid_retries + 1):
            text = await self._chat(messages, purpose=purpose, schema=schema)
            try:
                return parse_json_output(text, schema)
            except (ValidationError, ValueError) as exc:
                last_error = _short_error(exc)
                self._count(purpose, "invalid")
                log.info(
                    "%s: invalid model output (attempt %d): %s", purpose, attempt + 1, last_error
                )
                messages = [
                    *messages,
                    {"role": "assistant", "content": text[:4000]},
                    {
                        "role": "user",
                        "content": (
                            "That answer was not valid: " + last_error + ". Reply again with "
                            "only the JSON object, matching the requested fields exactly."
                        ),
                    },
                ]
        raise InvalidModelOutput(
            f"{purpose}: model {self._model} gave invalid output "
            f"{self._invalid_retries + 1} times; last error: {last_error}"
        )

    async def _chat(
        self, messages: list[dict[str, str]], *, purpose: str, schema: type[BaseModel]
    ) -> str:
        body: dict[str, Any] = {"model": self._model, "messages": messages, "temperature": 0}
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        if self._json_mode:
            body["response_format"] = response_format(schema, self._json_schema)

        async def post() -> httpx.Response:
            return await post_with_retry(
                self._client,
                "chat/completions",
                body,
                policy=self._policy,
                slots=self._slots,
                label=f"{purpose}: chat completions:",
                observe=lambda outcome: self._count(purpose, outcome),
            )

        resp = await self.guards.call_inline(
            self._key, post, deadline_s=self._deadline_s, inline_s=self._inline_s
        )
        return self._content(resp, purpose)

    def _content(self, resp: httpx.Response, purpose: str) -> str:
        try:
            data = resp.json()
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self._count(purpose, "error")
            raise ProviderError(f"{purpose}: not a chat completion: {resp.text[:300]}") from exc
        usage = data.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        self.usage.requests += 1
        self.usage.by_purpose[purpose] = self.usage.by_purpose.get(purpose, 0) + prompt + completion
        if self._metrics is not None:
            self._metrics.tokens.labels(purpose, "prompt").inc(prompt)
            self._metrics.tokens.labels(purpose, "completion").inc(completion)
        self._count(purpose, "ok")
        return content if isinstance(content, str) else json.dumps(content)

    def _count(self, purpose: str, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.requests.labels(purpose, outcome).inc()


def response_format(schema: type[BaseModel], how: SchemaFormat) -> dict[str, Any]:
    """The ``response_format`` of a request for ``schema``: ``json_object`` alone, or with
    the schema so that a server with constrained decoding (a grammar built from it) can
    only answer with JSON of that shape: OpenAI's ``json_schema`` format, or the
    ``schema`` key of ``json_object`` that llama-cpp-python's server reads (its 0.3
    releases know no other). The answer is validated either way."""
    if how == "off":
        return {"type": "json_object"}
    body = schema.model_json_schema()
    if how == "json_object":
        return {"type": "json_object", "schema": body}
    return {"type": "json_schema", "json_schema": {"name": schema.__name__, "schema": body}}


def parse_json_output(text: str, schema: type[M]) -> M:
    """Validate a model's answer: plain JSON, or JSON inside a ```json fence."""
    m = _FENCE.match(text)
    raw = m.group(1) if m else text.strip()
    return schema.model_validate_json(raw)


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "(root)"
            parts.append(f"{loc}: {err.get('msg')}")
        return "; ".join(parts)
    return str(exc)[:300]
