"""A request's head and body in one write: httpcore sends an HTTP/1.1 request's head and
its body as two writes, so the server is woken (and a packet sent) twice per call. The
streams here hold what is written until the connection next reads (the answer), or
until :data:`HOLD_BYTES` are held, and send it in one write.

HTTP/1.1 as httpcore speaks it only ever reads after the whole request is written (no
``Expect: 100-continue``), so holding the writes until the read changes nothing but the
number of packets. Installed on the clients' own transports by :func:`cork`.
"""

# ruff: noqa: ASYNC109 - httpcore's stream and backend interfaces take a timeout argument

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

HOLD_BYTES = 1 << 20
"""At most this much is held (a larger body goes out in writes of about this size)."""

log = logging.getLogger(__name__)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._size = 0

    def _flush(self, timeout: float | None) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._size = 0
            self._stream.write(data, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._held.append(buffer)
            self._size += len(buffer)
            if self._size >= HOLD_BYTES:
                self._flush(timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush(timeout)
        return self._stream.read(max_bytes, timeout)

    def close(self) -> None:
        self._held.clear()
        self._stream.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        self._flush(timeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._held: list[bytes] = []
        self._size = 0

    async def _flush(self, timeout: float | None) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._size = 0
            await self._stream.write(data, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._held.append(buffer)
            self._size += len(buffer)
            if self._size >= HOLD_BYTES:
                await self._flush(timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self._flush(timeout)
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._held.clear()
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        await self._flush(timeout)
        return _AsyncStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(
            self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def cork(transport: httpx.BaseTransport | httpx.AsyncBaseTransport) -> None:
    """Hold ``transport``'s writes until it reads (an httpx HTTP transport; others, and an
    httpx whose pool is laid out otherwise, are left as they are)."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.AsyncNetworkBackend):
        pool._network_backend = _AsyncBackend(backend)  # type: ignore[union-attr]
    elif isinstance(backend, httpcore.NetworkBackend):
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]
    else:
        log.debug("httpx transport %r not corked", type(transport).__name__)
