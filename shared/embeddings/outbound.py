"""Which addresses a user-supplied endpoint may point at (issue 17.2).

A user's embedding endpoint is called by the server, from inside the deployment's
network. By default it must resolve to public addresses only: loopback,
link-local (cloud metadata), private, shared, multicast and reserved ranges are
refused, for every address the host name resolves to (one bad address refuses
it). ``ENGRAM_EMBEDDING_ENDPOINT_ALLOW`` lists what a deployment allows anyway:
networks (``10.0.0.0/8``, ``127.0.0.1/32``), host names (``ollama.internal``), or
``*`` for anything. The system provider (``ENGRAM_EMBEDDING_URL``) is the
deployment's own choice and is not checked.

Resolution happens when settings are stored or tested and again before calls
(cached ``CACHE_S``), so a name that later resolves somewhere refused is caught.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
from urllib.parse import urlsplit

from shared.errors import ConfigError, ProviderError

CACHE_S = 30.0

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


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


def _public(ip: IpAddress) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


_cache: dict[tuple[str, int], tuple[float, list[IpAddress]]] = {}


async def _resolve(host: str, port: int) -> list[IpAddress]:
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


async def check_endpoint(url: str, allow: str) -> None:
    """Raise :class:`EndpointRefused` unless the server may call ``url``."""
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
        return
    for ip in await _resolve(host, port):
        if _public(ip) or any(ip in net for net in networks if net.version == ip.version):
            continue
        raise EndpointRefused(
            f"the endpoint's host {host!r} resolves to a non-public address ({ip}); "
            "this deployment does not call those (ENGRAM_EMBEDDING_ENDPOINT_ALLOW)"
        )


def public_reason(exc: ProviderError | ConfigError) -> str:
    """What to tell a user about a failed call to their endpoint: the kind of failure,
    never the remote body (that could be any internal service's answer)."""
    text = str(exc)
    status = re.search(r"HTTP (\d{3})", text)
    if "circuit open" in text:
        return "the endpoint failed repeatedly; calls to it are paused for a while"
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
    return "the endpoint's answer is not an embeddings response"
