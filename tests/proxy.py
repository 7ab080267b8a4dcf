"""A TCP proxy on loopback that a test can cut and restore: the service behind it
looks unreachable (connections refused, open ones reset) without stopping it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


class Proxy:
    def __init__(self, target_host: str, target_port: int, unix_path: str | None = None) -> None:
        self.target = (target_host, target_port)
        self.unix_path = unix_path
        self.port = _free_port()
        self._server: asyncio.AbstractServer | None = None
        self._links: set[asyncio.StreamWriter] = set()

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", self.port)
        return self

    async def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for w in list(self._links):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._links.clear()

    async def restore(self) -> None:
        await self.start()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.unix_path is not None:
                up_r, up_w = await asyncio.open_unix_connection(self.unix_path)
            else:
                up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._links.update((writer, up_w))

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    w.transport.abort()
                self._links.discard(w)

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proxied(url: str) -> Proxy:
    """A proxy (not started) in front of the server of a postgresql:// or redis:// URL;
    ``through(url, proxy)`` is the URL that goes through it."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    port = parts.port or (5432 if parts.scheme.startswith("postgres") else 6379)
    unix = f"{query['host']}/.s.PGSQL.{port}" if query.get("host", "").startswith("/") else None
    return Proxy(parts.hostname or "127.0.0.1", port, unix)


def through(url: str, proxy: Proxy) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "host"]
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(
        parts._replace(netloc=f"{userinfo}127.0.0.1:{proxy.port}", query=urlencode(query))
    )
