"""The sync (:class:`Engram`) and async (:class:`AsyncEngram`) clients.

Both send the :class:`~engram_client._calls.Call` an endpoint builder makes,
retry 429 and 503 (and connection failures) with exponential backoff and
jitter, honouring ``Retry-After``, and raise an :mod:`engram_client.errors`
exception for any other failure. A call returns the endpoint's answer model.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpcore
import httpx
from pydantic_core import PydanticSerializationError, to_json

from engram_client import _calls as c
from engram_client._corked import cork
from engram_client._wire import AsyncWire
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
    # what httpx.Client would add to every request, and the key
    out = {
        "Accept": "*/*",
        "Accept-Encoding": "gzip, deflate",
        "Connection": "keep-alive",
        "Authorization": f"Bearer {api_key}",
        "User-Agent": "engram-client/0.1",
    }
    if user:
        out["X-Engram-User"] = user
    return out


# an endpoint's path as the builders make it (ids quoted): sent as it is
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/_.~%!$&'()*+,;=:@-]*")

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx.TransportError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)
"""A request that failed on the way (retried, then ``ConnectionFailed``): httpx's, and
httpcore's own when its pool is called directly (the same names: ConnectError...)."""


@dataclass(frozen=True)
class _Answer:
    status: int
    retry_after: str | None
    content: bytes


def _json(value: Any) -> bytes:
    """``value`` as httpx encodes ``json=`` (``json.dumps``, compact, UTF-8, no NaN). Plain
    JSON values (dicts with text keys, lists, text, numbers, booleans, None; finite
    floats) are written by pydantic's encoder, the same JSON ~4x faster (a checkpoint's
    state: 18 us against 76 for 62 kB; a float may be spelled 1.5e-7 for 1.5e-07);
    anything else as before, with its errors."""
    if _plain_json(value):
        try:
            return to_json(value)
        except PydanticSerializationError:
            pass  # e.g. a lone surrogate: json.dumps below raises as it always did
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode()


def _plain_json(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            continue
        if t is float:
            if not math.isfinite(v):
                return False
        elif t is dict:
            for k in v:
                if type(k) is not str:
                    return False
            stack.extend(v.values())
        elif t is list or t is tuple:
            stack.extend(v)
        else:
            return False
    return True


class _Requests:
    """The requests of one client. httpx's client layer (URL merging, auth and redirect
    hooks, the cookie jar, its request and response models) cost as much CPU per call
    as the HTTP exchange itself (docs/benchmarks.md, issue 32). A call goes to the
    connection pool of the client's own transport as an httpcore request, with the
    headers httpx would send (but no ``Accept-Encoding``: the answer is not compressed
    on the way); a call with query parameters, or to a transport given to the client,
    goes to the transport as the ``httpx.Request`` ``httpx.Client`` would build. An API
    key is the only credential and the API never redirects."""

    def __init__(
        self, base_url: str, api_key: str, user: str | None, timeout: float, pool: object
    ) -> None:
        url = httpx.URL(base_url.rstrip("/"))
        self.base = str(url)
        self.headers = _headers(api_key, user)
        self.json_headers = {**self.headers, "Content-Type": "application/json"}
        self.extensions = {"timeout": httpx.Timeout(timeout).as_dict()}
        self.pool = pool
        self.url = (url.raw_scheme, url.raw_host, url.port, url.raw_path.rstrip(b"/"))
        self.raw_headers = [(b"Host", url.netloc)] + [
            (k.encode(), v.encode()) for k, v in self.headers.items() if k != "Accept-Encoding"
        ]
        # the same headers, asking for the answer as it is
        self.wire_head = b"".join(
            b"%s: %s\r\n" % (k, b"identity" if k == b"Accept-Encoding" else v)
            for k, v in [(b"Host", url.netloc)]
            + [(k.encode(), v.encode()) for k, v in self.headers.items()]
        )

    def wire(self, call: c.Call[Any]) -> bytes | None:
        """The call as the bytes of an HTTP/1.1 request for :class:`AsyncWire`, or None."""
        if call.params or not _PLAIN_PATH.fullmatch(call.path):
            return None
        line = b"%s %s%s HTTP/1.1\r\n" % (call.method.encode(), self.url[3], call.path.encode())
        if call.json is not None:
            content = _json(call.json)
            size = b"Content-Length: %d\r\nContent-Type: application/json\r\n\r\n" % len(content)
            return line + self.wire_head + size + content
        if call.method in ("POST", "PUT", "PATCH"):
            return line + self.wire_head + b"Content-Length: 0\r\n\r\n"
        return line + self.wire_head + b"\r\n"

    def direct(self, call: c.Call[Any]) -> httpcore.Request | None:
        """The call as an httpcore request for the client's own pool, or None."""
        if self.pool is None or call.params or not _PLAIN_PATH.fullmatch(call.path):
            return None
        scheme, host, port, prefix = self.url
        url = httpcore.URL(scheme=scheme, host=host, port=port, target=prefix + call.path.encode())
        headers = self.raw_headers
        content = None
        if call.json is not None:
            content = _json(call.json)
            headers = [
                *headers,
                (b"Content-Length", str(len(content)).encode()),
                (b"Content-Type", b"application/json"),
            ]
        elif call.method in ("POST", "PUT", "PATCH"):
            headers = [*headers, (b"Content-Length", b"0")]
        return httpcore.Request(
            call.method, url, headers=headers, content=content, extensions=self.extensions
        )

    def build(self, call: c.Call[Any]) -> httpx.Request:
        """The call as ``httpx.Client.request`` would make it."""
        if call.json is None:
            return httpx.Request(
                call.method,
                self.base + call.path,
                params=call.params or None,
                headers=self.headers,
                extensions=self.extensions,
            )
        return httpx.Request(
            call.method,
            self.base + call.path,
            params=call.params or None,
            headers=self.json_headers,
            content=_json(call.json),
            extensions=self.extensions,
        )


def _wire_for(base_url: str, api_key: str, user: str | None, timeout: float) -> AsyncWire | None:
    """The async client's own HTTP/1.1 connections for an ``http://`` URL whose headers are
    plain text (else httpx: TLS, and what h11 would refuse, as before)."""
    url = httpx.URL(base_url)
    texts = [api_key, user or "", url.host]
    if url.scheme != "http" or any(not t.isprintable() or not t.isascii() for t in texts):
        return None
    return AsyncWire(url.host, url.port or 80, timeout)


def _retry_after(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"retry-after":
            return value.decode("latin-1")
    return None


def _own_pool(transport: object) -> object:
    """The httpcore pool an httpx HTTP transport sends with (None if laid out otherwise)."""
    pool = getattr(transport, "_pool", None)
    own = isinstance(pool, httpcore.ConnectionPool | httpcore.AsyncConnectionPool)
    return pool if own else None


def _decode(answer: _Answer, call: c.Call[T]) -> T:
    if 200 <= answer.status < 300:
        return call.model.model_validate_json(answer.content)  # type: ignore[attr-defined, no-any-return]
    try:
        body: Any = json.loads(answer.content)
    except ValueError:
        body = answer.content.decode("utf-8", "replace")
    raise error_for(answer.status, body)


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
        pool = None
        if transport is None:
            transport = httpx.HTTPTransport()
            cork(transport)
            pool = _own_pool(transport)
        self._transport = transport
        self._requests = _Requests(base_url, api_key, user, timeout, pool)
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
                answer = self._exchange(call)
            except TRANSPORT_ERRORS as exc:
                if last:
                    raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from exc
                time.sleep(self.retry.delay(attempt, None))
                continue
            if answer.status in RETRY_STATUSES and not last:
                time.sleep(self.retry.delay(attempt, answer.retry_after))
                continue
            return _decode(answer, call)
        raise EngramError("no attempts configured")  # attempts < 1

    def _exchange(self, call: c.Call[Any]) -> _Answer:
        direct = self._requests.direct(call)
        if direct is not None:
            pool: httpcore.ConnectionPool = self._requests.pool  # type: ignore[assignment]
            raw = pool.handle_request(direct)
            try:
                content = raw.read()
            finally:
                raw.close()
            return _Answer(raw.status, _retry_after(raw.headers), content)
        response = self._transport.handle_request(self._requests.build(call))
        try:
            response.read()
        finally:
            response.close()
        return _Answer(response.status_code, response.headers.get("retry-after"), response.content)

    def close(self) -> None:
        self._transport.close()

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
        pool = None
        self._wire: AsyncWire | None = None
        if transport is None:
            transport = httpx.AsyncHTTPTransport()
            cork(transport)
            pool = _own_pool(transport)
            self._wire = _wire_for(base_url, api_key, user, timeout)
        self._transport = transport
        self._requests = _Requests(base_url, api_key, user, timeout, pool)
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
                answer = await self._exchange(call)
            except TRANSPORT_ERRORS as exc:
                if last:
                    raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from exc
                await asyncio.sleep(self.retry.delay(attempt, None))
                continue
            if answer.status in RETRY_STATUSES and not last:
                await asyncio.sleep(self.retry.delay(attempt, answer.retry_after))
                continue
            return _decode(answer, call)
        raise EngramError("no attempts configured")

    async def _exchange(self, call: c.Call[Any]) -> _Answer:
        if self._wire is not None:
            request = self._requests.wire(call)
            if request is not None:
                got = await self._wire.send(request, head=call.method == "HEAD")
                retry_after = got.headers.get(b"retry-after")
                wait = None if retry_after is None else retry_after.decode("latin-1")
                return _Answer(got.status, wait, got.content)
        direct = self._requests.direct(call)
        if direct is not None:
            pool: httpcore.AsyncConnectionPool = self._requests.pool  # type: ignore[assignment]
            raw = await pool.handle_async_request(direct)
            try:
                content = await raw.aread()
            finally:
                await raw.aclose()
            return _Answer(raw.status, _retry_after(raw.headers), content)
        response = await self._transport.handle_async_request(self._requests.build(call))
        try:
            await response.aread()
        finally:
            await response.aclose()
        return _Answer(response.status_code, response.headers.get("retry-after"), response.content)

    async def aclose(self) -> None:
        if self._wire is not None:
            await self._wire.aclose()
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
