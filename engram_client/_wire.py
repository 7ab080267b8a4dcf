"""HTTP/1.1 over asyncio streams, for the async client's calls to an ``http://`` engram.

httpcore (h11's state machine, anyio's cancel scopes and locks, the pool's bookkeeping)
cost ~0.47 ms of CPU per call on the checkpoint bench's machine; writing the request
and reading the answer on an asyncio stream costs ~0.07 (docs/benchmarks.md, issue 32).
An engram call is a small JSON exchange: one request written at once (head and body,
so the server is woken once), the answer read by its ``Content-Length`` (or chunked),
the connection kept for the next call unless either side said ``close``.

What this does not do is left to httpx: TLS (``https://``), proxies, query strings, a
transport given to the client. Failures are httpx's exceptions (``ConnectError``,
``ReadError``, ``ReadTimeout``, ``RemoteProtocolError``...), which the client retries
and raises as ``ConnectionFailed`` as before. A kept connection the server closed
while it was idle is noticed before it is used, and a call that finds it closed
before any byte of the answer came is sent once more on a new connection (the server
never read it). The timeout bounds connecting, writing, and reading the whole answer.
"""

from __future__ import annotations

import asyncio

import httpx

KEEP_IDLE = 20
"""Idle connections kept (httpx's default keep-alive limit)."""
MAX_OPEN = 100
"""Connections open at once (httpx's default limit); more calls at once wait their turn."""
MAX_HEAD = 1 << 20
"""An answer's status line and headers may be this long."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


class Answer:
    __slots__ = ("status", "headers", "content")

    def __init__(self, status: int, headers: dict[bytes, bytes], content: bytes) -> None:
        self.status = status
        self.headers = headers
        self.content = content


class AsyncWire:
    """Keep-alive HTTP/1.1 connections to one ``host:port``; :meth:`send` one request."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._idle: list[_Connection] = []
        self._closed = False
        self._open = asyncio.Semaphore(MAX_OPEN)

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {self.host}:{self.port}") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        return _Connection(reader, writer)

    def _take(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    async def send(self, request: bytes, *, head: bool = False) -> Answer:
        """``request`` (its head and body) on a kept connection or a new one; the answer."""
        async with self._open:  # one connection per call under way
            return await self._send(request, head)

    async def _send(self, request: bytes, head: bool) -> Answer:
        conn = self._take()
        if conn is not None:
            try:
                return await self._exchange(conn, request, head)
            except _NothingBack:
                conn.close()  # closed by the server while idle: it never read this
        conn = await self._connect()
        try:
            return await self._exchange(conn, request, head)
        except _NothingBack as exc:
            raise httpx.RemoteProtocolError("server disconnected without an answer") from exc

    async def _exchange(self, conn: _Connection, request: bytes, head: bool) -> Answer:
        started = False
        try:
            async with asyncio.timeout(self.timeout):
                conn.writer.write(request)
                await conn.writer.drain()
                try:
                    line = await conn.reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError as exc:
                    if not exc.partial:
                        raise _NothingBack from exc
                    raise
                started = True
                answer, keep = await _read_answer(conn.reader, line, head)
        except _NothingBack:
            raise
        except TimeoutError as exc:
            conn.close()
            raise httpx.ReadTimeout("no complete answer within the timeout") from exc
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            conn.close()
            raise httpx.RemoteProtocolError(f"malformed or cut answer: {exc}") from exc
        except ConnectionError as exc:
            conn.close()
            if not started:
                raise _NothingBack from exc
            raise httpx.ReadError(str(exc)) from exc
        except OSError as exc:
            conn.close()
            if not started:
                raise httpx.WriteError(str(exc)) from exc
            raise httpx.ReadError(str(exc)) from exc
        except BaseException:  # cancelled mid-exchange: the connection's state is unknown
            conn.close()
            raise
        if keep and not self._closed and len(self._idle) < KEEP_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return answer

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _NothingBack(Exception):
    """The connection was closed before any byte of the answer came."""


async def _read_answer(
    reader: asyncio.StreamReader, head: bytes, head_request: bool
) -> tuple[Answer, bool]:
    lines = head[:-4].split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    status = int(rest[:3])
    if not version.startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP/1 answer: {lines[0][:40]!r}")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ValueError(f"header line without a colon: {line[:40]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = headers[key] + b", " + value if key in headers else value
    keep = version == b"HTTP/1.1" and b"close" not in headers.get(b"connection", b"").lower()
    if head_request or status in (204, 304):
        return Answer(status, headers, b""), keep
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        chunks = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                    pass
                break
            chunks.append((await reader.readexactly(size + 2))[:-2])
        return Answer(status, headers, b"".join(chunks)), keep
    length = headers.get(b"content-length")
    if length is not None:
        return Answer(status, headers, await reader.readexactly(int(length))), keep
    return Answer(status, headers, await reader.read()), False  # until the server closes
