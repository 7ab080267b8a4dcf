"""The one guard on calls the server makes to a URL a user chose (issue 17.2, 29.8):
a user's embedding endpoint today, a webhook tomorrow.

The server calls from inside the deployment's network, so by default a user's URL
must resolve to public addresses only. Refused, for every address the host name
resolves to (one bad address refuses it): loopback, link-local (cloud metadata),
private, shared (100.64/10), multicast, reserved and unspecified ranges, and every
IPv6 way of writing one of them: IPv4-mapped (``::ffff:7f00:1`` as well as
``::ffff:127.0.0.1``), IPv4-compatible (``::127.0.0.1``), IPv4-translated,
NAT64 (``64:ff9b::/96`` embedding a refused IPv4, ``64:ff9b:1::/48``), 6to4
(``2002::/16`` embedding one), Teredo, site-local (``fec0::/10``), unique-local
(``fc00::/7``), and anything outside global unicast (``2000::/3``).
``ENGRAM_EMBEDDING_ENDPOINT_ALLOW`` lists what a deployment allows anyway:
networks (``10.0.0.0/8``, ``127.0.0.1/32``; an IPv6 form embedding an IPv4 is
matched as that IPv4), host names (``ollama.internal``), or ``*`` for anything.
The system provider (``ENGRAM_EMBEDDING_URL``) is the deployment's own choice and
is not checked.

The name is resolved once per request and the connection goes to the address that
was checked (:class:`PinnedTransport`: the URL's host is replaced by the address,
the ``Host`` header and TLS server name stay the name's), so a name that resolves
to a public address for the check and a private one for the connection (DNS
rebinding) reaches nothing it should not. Settings are also checked when stored or
tested (422 naming ``endpoint_url``, before any request); answers are cached
``CACHE_S``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import httpx

from shared.errors import ConfigError, ProviderError

CACHE_S = 30.0

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[IpAddress]]]


class EndpointRefused(ConfigError):
    """The endpoint is not one this deployment lets the server call."""


def parse_allow(raw: str) -> tuple[bool, list[IpNetwork], set[str]]:
    """``(anything, networks, host names)`` from the comma-separated setting."""
    networks: list[IpNetwork] = []
    names: set[str] = set()
    anything = False
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        if part == "*":
            anything = True
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            names.add(part.lower().rstrip("."))
    return anything, networks, names


_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_V6_REFUSED = [
    ipaddress.ip_network(n)
    for n in ("64:ff9b:1::/48", "2001::/32", "fc00::/7", "fec0::/10", "fe80::/10", "ff00::/8")
]
_V6_CARRYING_V4 = [  # the low 32 bits are an IPv4 address
    ipaddress.ip_network(n) for n in ("::ffff:0:0/96", "::/96", "::ffff:0:0:0/96", "64:ff9b::/96")
]


def _as_v4(ip: IpAddress) -> IpAddress:
    """The IPv4 address an IPv6 form carries (mapped, compatible, translated, NAT64,
    6to4), else ``ip`` itself."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in _V6_CARRYING_V4):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def public(ip: IpAddress) -> bool:
    """May the server call ``ip`` without the deployment allowing it?"""
    if isinstance(ip, ipaddress.IPv6Address):
        v4 = _as_v4(ip)
        if v4 is not ip:
            return public(v4)
        if ip not in _V6_GLOBAL_UNICAST or any(ip in net for net in _V6_REFUSED):
            return False
    return ip.is_global and not ip.is_multicast


def _allowed_network(ip: IpAddress, networks: list[IpNetwork]) -> bool:
    return any(a in net for a in {ip, _as_v4(ip)} for net in networks if net.version == a.version)


_cache: dict[tuple[str, int], tuple[float, list[IpAddress]]] = {}


async def resolve(host: str, port: int) -> list[IpAddress]:
    """Every address ``host`` resolves to (cached ``CACHE_S``)."""
    now = time.monotonic()
    hit = _cache.get((host, port))
    if hit is not None and now - hit[0] < CACHE_S:
        return hit[1]
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise EndpointRefused(f"the endpoint's host {host!r} does not resolve") from exc
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if len(_cache) > 10_000:
        _cache.clear()
    _cache[(host, port)] = (now, addresses)
    return addresses


async def checked_address(
    url: str, allow: str, *, resolver: Resolver = resolve
) -> IpAddress | None:
    """The address the server may connect to for ``url``; None when the deployment
    allows the host by name (or anything); raises :class:`EndpointRefused`."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise EndpointRefused("the endpoint URL cannot be parsed") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointRefused("the endpoint URL must be http(s)://host[:port]/...")
    if parts.username or parts.password:
        raise EndpointRefused("the endpoint URL must not carry credentials")
    host = parts.hostname.lower().rstrip(".")
    anything, networks, names = parse_allow(allow)
    if anything or host in names:
        return None
    addresses = await resolver(host, port)
    if not addresses:
        raise EndpointRefused(f"the endpoint's host {host!r} does not resolve")
    for ip in addresses:
        if not (public(ip) or _allowed_network(ip, networks)):
            raise EndpointRefused(
                f"the endpoint's host {host!r} resolves to a non-public address ({ip}); "
                "this deployment does not call those (ENGRAM_EMBEDDING_ENDPOINT_ALLOW)"
            )
    return addresses[0]


async def check_endpoint(url: str, allow: str) -> None:
    """Raise :class:`EndpointRefused` unless the server may call ``url``."""
    await checked_address(url, allow)


class PinnedTransport(httpx.AsyncBaseTransport):
    """Every request checked (:func:`checked_address`) and sent to the address checked,
    with the ``Host`` header and TLS server name of the URL's name."""

    def __init__(
        self,
        allow: str,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        resolver: Resolver = resolve,
        owns_inner: bool = True,
    ) -> None:
        self._allow = allow
        self._inner = inner or httpx.AsyncHTTPTransport()
        self._resolver = resolver
        self._owns_inner = owns_inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        address = await checked_address(str(url), self._allow, resolver=self._resolver)
        if address is not None:
            request.url = url.copy_with(host=str(address))
            if url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": url.host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._owns_inner:
            await self._inner.aclose()


def public_reason(exc: ProviderError | ConfigError) -> str:
    """What to store or tell a user about a failed call to an endpoint: the kind of
    failure and the HTTP status, never the remote body (that could be any internal
    service's answer, or a secret)."""
    text = str(exc)
    status = re.search(r"HTTP (\d{3})", text)
    if "circuit open" in text:
        return "the endpoint failed repeatedly; calls to it are paused for a while"
    if "still in flight" in text or "out of line" in text:
        return "the endpoint is slow: an earlier call is still in flight; retried later"
    if status:
        code = status.group(1)
        if code in ("401", "403"):
            return f"the endpoint refused the API key (HTTP {code})"
        return f"the endpoint answered HTTP {code}"
    if "timed out" in text or "no answer within" in text:
        return "the endpoint did not answer in time"
    if "cannot reach" in text:
        return "cannot connect to the endpoint"
    if isinstance(exc, EndpointRefused):
        return text
    if isinstance(exc, ConfigError):
        return "the embedding settings cannot be used: " + text[:200]
    return "the endpoint's answer is not an embeddings response"
