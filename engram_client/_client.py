"""The sync (:class:`Engram`) and async (:class:`AsyncEngram`) clients.

Both send the :class:`~engram_client._calls.Call` an endpoint builder makes,
retry 429 and 503 (and connection failures) with exponential backoff and
jitter, honouring ``Retry-After``, and raise an :mod:`engram_client.errors`
exception for any other failure. A call returns the endpoint's answer model.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from engram_client import _calls as c
from engram_client._corked import cork
from engram_client.errors import ConnectionFailed, EngramError, error_for

P = ParamSpec("P")
T = TypeVar("T")

RETRY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry 429/503 and connection failures."""

    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 10.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return float(min(float(retry_after), self.max_backoff_s))
            except ValueError:
                pass
        base = min(self.backoff_s * 2**attempt, self.max_backoff_s)
        return float(base * (0.5 + random.random() / 2))


def _headers(api_key: str, user: str | None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {api_key}", "User-Agent": "engram-client/0.1"}
    if user:
        out["X-Engram-User"] = user
    return out


def _decode(response: httpx.Response, call: c.Call[T]) -> T:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if response.is_success:
        return call.model.model_validate(body)  # type: ignore[attr-defined, no-any-return]
    raise error_for(response.status_code, body)


def _sync(builder: Callable[P, c.Call[T]]) -> Callable[Concatenate[Any, P], T]:
    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._client.send(builder(*args, **kwargs))
        return result

    method.__doc__ = builder.__doc__
    method.__name__ = builder.__name__
    return method


def _async(builder: Callable[P, c.Call[T]]) -> Callable[Concatenate[Any, P], Awaitable[T]]:
    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self._client.send(builder(*args, **kwargs))
        return result

    method.__doc__ = builder.__doc__
    method.__name__ = builder.__name__
    return method


class _Group:
    def __init__(self, client: Any) -> None:
        self._client = client


class Memory(_Group):
    search = _sync(c.memory_search)
    add = _sync(c.memory_add)
    get = _sync(c.memory_get)
    archive = _sync(c.memory_archive)
    delete = _sync(c.memory_delete)
    themes = _sync(c.memory_themes)


class Facts(_Group):
    save = _sync(c.facts_save)
    search = _sync(c.facts_search)
    forget = _sync(c.facts_forget)
    list = _sync(c.facts_list)


class Episodes(_Group):
    recall = _sync(c.episodes_recall)
    list = _sync(c.episodes_list)
    get = _sync(c.episodes_get)


class Messages(_Group):
    search = _sync(c.messages_search)


class PeopleApi(_Group):
    list = _sync(c.people_list)
    resolve = _sync(c.people_resolve)


class ToolsApi(_Group):
    list = _sync(c.tools_list)
    call = _sync(c.tools_call)


class Checkpoints(_Group):
    put = _sync(c.checkpoints_put)
    put_writes = _sync(c.checkpoints_put_writes)
    query = _sync(c.checkpoints_query)
    latest = _sync(c.checkpoints_latest)
    delete_thread = _sync(c.checkpoints_delete_thread)
    delete_matching = _sync(c.checkpoints_delete_matching)
    prune = _sync(c.checkpoints_prune)
    copy = _sync(c.checkpoints_copy)


class Store(_Group):
    put = _sync(c.store_put)
    get = _sync(c.store_get)
    delete = _sync(c.store_delete)
    search = _sync(c.store_search)
    namespaces = _sync(c.store_namespaces)


class TurnsApi(_Group):
    publish = _sync(c.turns_publish)
    list = _sync(c.turns_list)
    delete = _sync(c.turns_delete)


class AsyncMemory(_Group):
    search = _async(c.memory_search)
    add = _async(c.memory_add)
    get = _async(c.memory_get)
    archive = _async(c.memory_archive)
    delete = _async(c.memory_delete)
    themes = _async(c.memory_themes)


class AsyncFacts(_Group):
    save = _async(c.facts_save)
    search = _async(c.facts_search)
    forget = _async(c.facts_forget)
    list = _async(c.facts_list)


class AsyncEpisodes(_Group):
    recall = _async(c.episodes_recall)
    list = _async(c.episodes_list)
    get = _async(c.episodes_get)


class AsyncMessages(_Group):
    search = _async(c.messages_search)


class AsyncPeopleApi(_Group):
    list = _async(c.people_list)
    resolve = _async(c.people_resolve)


class AsyncToolsApi(_Group):
    list = _async(c.tools_list)
    call = _async(c.tools_call)


class AsyncCheckpoints(_Group):
    put = _async(c.checkpoints_put)
    put_writes = _async(c.checkpoints_put_writes)
    query = _async(c.checkpoints_query)
    latest = _async(c.checkpoints_latest)
    delete_thread = _async(c.checkpoints_delete_thread)
    delete_matching = _async(c.checkpoints_delete_matching)
    prune = _async(c.checkpoints_prune)
    copy = _async(c.checkpoints_copy)


class AsyncStore(_Group):
    put = _async(c.store_put)
    get = _async(c.store_get)
    delete = _async(c.store_delete)
    search = _async(c.store_search)
    namespaces = _async(c.store_namespaces)


class AsyncTurnsApi(_Group):
    publish = _async(c.turns_publish)
    list = _async(c.turns_list)
    delete = _async(c.turns_delete)


class Engram:
    """Blocking client. ``Engram("http://127.0.0.1:8000", api_key)``; an admin key
    acts for ``user``. Use it as a context manager, or call :meth:`close`."""

    me = _sync(c.me)
    remember = _sync(c.remember)
    recall = _sync(c.recall)
    context = _sync(c.context)

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        user: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if transport is None:
            transport = httpx.HTTPTransport()
            cork(transport)
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=_headers(api_key, user),
            timeout=timeout,
            transport=transport,
        )
        self.retry = retry or RetryPolicy()
        self._client = self
        self.memory = Memory(self)
        self.facts = Facts(self)
        self.episodes = Episodes(self)
        self.messages = Messages(self)
        self.people = PeopleApi(self)
        self.tools = ToolsApi(self)
        self.checkpoints = Checkpoints(self)
        self.store = Store(self)
        self.turns = TurnsApi(self)

    def send(self, call: c.Call[T]) -> T:
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = self._http.request(
                    call.method, call.path, json=call.json, params=call.params or None
                )
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from exc
                time.sleep(self.retry.delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                time.sleep(self.retry.delay(attempt, response.headers.get("retry-after")))
                continue
            return _decode(response, call)
        raise EngramError("no attempts configured")  # attempts < 1

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncEngram:
    """The asyncio client; the same methods as :class:`Engram`, awaited."""

    me = _async(c.me)
    remember = _async(c.remember)
    recall = _async(c.recall)
    context = _async(c.context)

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        user: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if transport is None:
            transport = httpx.AsyncHTTPTransport()
            cork(transport)
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=_headers(api_key, user),
            timeout=timeout,
            transport=transport,
        )
        self.retry = retry or RetryPolicy()
        self._client = self
        self.memory = AsyncMemory(self)
        self.facts = AsyncFacts(self)
        self.episodes = AsyncEpisodes(self)
        self.messages = AsyncMessages(self)
        self.people = AsyncPeopleApi(self)
        self.tools = AsyncToolsApi(self)
        self.checkpoints = AsyncCheckpoints(self)
        self.store = AsyncStore(self)
        self.turns = AsyncTurnsApi(self)

    async def send(self, call: c.Call[T]) -> T:
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.json, params=call.params or None
                )
            except httpx.TransportError as exc:
                if last:
                    raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from exc
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                await asyncio.sleep(self.retry.delay(attempt, response.headers.get("retry-after")))
                continue
            return _decode(response, call)
        raise EngramError("no attempts configured")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
