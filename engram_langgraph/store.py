"""LangGraph's store (``BaseStore``) on engram's memory.

An item is an engram memory addressed by (namespace, key): engram embeds it, its
memory search finds it, and the browser shows it. ``search`` with a query ranks by
engram's memory search (semantic and full-text, as the deployment embeds) and tops
up with the newest matching items (score ``None``); ``filter`` matches values by
containment (``{"field": value}`` or ``{"field": {"$eq": value}}``). Every call goes
over engram's HTTP API with :mod:`engram_client`; ``batch`` runs its operations in
order. TTLs are not supported (``supports_ttl`` is false).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from engram_client import AsyncEngram, ClientPair, Engram, NotFound
from engram_client import _calls as c
from engram_client.models import StoreItem
from engram_langgraph._clients import OnEngram


class EngramStore(OnEngram, BaseStore):
    """``EngramStore(url, api_key)``: LangGraph's long-term memory store, sync and async.

    ``user`` names the user an admin key acts for; or pass ready ``client`` /
    ``aclient`` to share their connections.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        user: str | None = None,
        client: Engram | None = None,
        aclient: AsyncEngram | None = None,
    ) -> None:
        self._clients = ClientPair(base_url, api_key, user=user, client=client, aclient=aclient)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        out: list[Result] = []
        for op in ops:
            call, read = _call(op)
            try:
                out.append(read(self.client.send(call)))
            except NotFound:
                out.append(None)
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        out: list[Result] = []
        for op in ops:
            call, read = _call(op)
            try:
                out.append(read(await self.aclient.send(call)))
            except NotFound:
                out.append(None)
        return out


def _item(i: StoreItem) -> Item:
    return Item(
        value=i.value,
        key=i.key,
        namespace=tuple(i.namespace),
        created_at=i.created_at,  # type: ignore[arg-type]  # Item parses ISO strings
        updated_at=i.updated_at,  # type: ignore[arg-type]
    )


def _hit(i: StoreItem) -> SearchItem:
    return SearchItem(
        namespace=tuple(i.namespace),
        key=i.key,
        value=i.value,
        created_at=i.created_at,  # type: ignore[arg-type]
        updated_at=i.updated_at,  # type: ignore[arg-type]
        score=i.score,
    )


def _call(op: Op) -> tuple[c.Call[Any], Any]:
    """The engram call for one operation, and how its answer becomes the result."""
    if isinstance(op, GetOp):
        return c.store_get(list(op.namespace), op.key), _item
    if isinstance(op, PutOp):
        if op.value is None:
            return c.store_delete(list(op.namespace), op.key), lambda _: None
        index = op.index if isinstance(op.index, list) else None
        put = c.store_put(list(op.namespace), op.key, dict(op.value), index=index)
        return put, lambda _: None
    if isinstance(op, SearchOp):
        search = c.store_search(
            list(op.namespace_prefix),
            query=op.query,
            filter=op.filter,
            limit=op.limit,
            offset=op.offset,
        )
        return search, lambda found: [_hit(i) for i in found.items]
    if isinstance(op, ListNamespacesOp):
        prefix = suffix = None
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix":
                prefix = list(cond.path)
            else:
                suffix = list(cond.path)
        listed = c.store_namespaces(
            prefix=prefix, suffix=suffix, max_depth=op.max_depth, limit=op.limit, offset=op.offset
        )
        return listed, lambda found: [tuple(n) for n in found.namespaces]
    raise ValueError(f"unknown operation {type(op).__name__}")
