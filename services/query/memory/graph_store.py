"""LangGraph's store on engram's memory: items addressed by (namespace, key).

An item is a ``memory_items`` row written by the one writer
(:func:`shared.memory.writer.insert_items`): type ``other``, category
:data:`CATEGORY`, the namespace's labels joined by ``.`` (LangGraph forbids dots
in a label) as its ``namespace``, the key as its ``key``, the value as its
``data.value``, and as its ``content`` the text that is embedded and searched: the
value's ``index`` fields, or the whole value as JSON. Saving a key again is the
writer's upsert (the text re-embedded when it changed). So the embedder embeds
items, the memory search finds them, and the browser shows them like any memory.

Search with a query ranks by engram's memory search (hybrid: semantic and
full-text) and tops up with the newest items that match (score null); without
one, the newest first. ``filter`` keeps items whose value contains the given
JSON (``{"field": value}``, dotted fields nest) and passes its comparisons
(``{"field": {"$gt": 3}}``: $eq, $ne, $gt, $gte, $lt, $lte).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, Self

import asyncpg
from pydantic import BaseModel

from services.query.embeddings.query import lists_newest
from services.query.memory import items as ms
from services.query.memory.search import memory_search
from services.query.memory.state import QueryState
from services.query.ranking.memories import MAX_LIMIT, SearchParams
from shared.errors import InvalidRequest, NotFound
from shared.memory.writer import NewItem, insert_items, publish_written
from shared.streams import Publisher

CATEGORY = "store"
"""The category of the memory rows that are store items."""

SEP = "."
MAX_NAMESPACE_CHARS = 255

_ITEM = "id, namespace, key, data, created_at, updated_at"
_STORE = "user_id = $1 AND category = 'store' AND key IS NOT NULL AND status = 'active'"

GET = f"SELECT {_ITEM} FROM memory_items WHERE {_STORE} AND namespace = $2 AND key = $3"

# $2 a namespace (NULL: every one), $3 its children's LIKE pattern, $4 a JSON the value
# contains, $5 only these ids (NULL: any), $6 not these, $7 the limit; {compare}: the
# filter's comparisons, each on $8... (an operator from COMPARE, never a value).
MATCHING = f"""
SELECT {_ITEM} FROM memory_items
WHERE {_STORE}
  AND ($2::text IS NULL OR namespace = $2 OR namespace LIKE $3)
  AND ($4::jsonb IS NULL OR data -> 'value' @> $4)
  AND ($5::uuid[] IS NULL OR id = ANY($5))
  AND NOT (id = ANY($6::uuid[])) {{compare}}
ORDER BY updated_at DESC, id
LIMIT $7
"""

# A filter's operators: $eq is containment, the others compare the field's JSON value
# (numbers as numbers, strings as strings).
COMPARE = {
    "$ne": "IS DISTINCT FROM",
    "$gt": ">",
    "$gte": ">=",
    "$lt": "<",
    "$lte": "<=",
}
MAX_COMPARISONS = 20

NAMESPACES = f"SELECT DISTINCT namespace FROM memory_items WHERE {_STORE}"


class Item(BaseModel):
    """A store item: its value under (namespace, key)."""

    namespace: list[str]
    """The namespace's labels."""
    key: str
    value: dict[str, Any]
    created_at: str
    """ISO 8601 (as ``updated_at``)."""
    updated_at: str

    @classmethod
    def of(cls, r: asyncpg.Record, **more: Any) -> Self:
        """The item of a row of ``_ITEM`` (``more``: a subclass's further fields)."""
        return cls(
            namespace=r["namespace"].split(SEP),
            key=r["key"],
            value=_value(r["data"]),
            created_at=r["created_at"].isoformat(),
            updated_at=r["updated_at"].isoformat(),
            **more,
        )


class Hit(Item):
    """An item a search found."""

    score: float | None
    """The memory search's score; None for an item that tops up the ranked ones."""


class Hits(BaseModel):
    """A search's page of items: ranked first (with a query), then newest first."""

    items: list[Hit]


class NamespaceList(BaseModel):
    namespaces: list[list[str]]
    """Each namespace's labels (cut to the depth asked), sorted."""


class ItemDeleted(BaseModel):
    deleted: Literal[0, 1]
    """0 when there was no item."""


def namespace_text(labels: list[str], field: str = "namespace") -> str:
    """The labels as one namespace; each non-empty and dot-free (LangGraph's rule)."""
    for label in labels:
        if not label or SEP in label:
            raise InvalidRequest(f"{field}: a label is empty or holds a '.'")
    text = SEP.join(labels)
    if len(text) > MAX_NAMESPACE_CHARS:
        raise InvalidRequest(f"{field}: longer than {MAX_NAMESPACE_CHARS} characters joined")
    return text


def index_text(value: dict[str, Any], index: list[str] | None) -> str:
    """What is embedded: the ``index`` fields' values (dotted paths), else the JSON."""
    if index:
        parts = []
        for path in index:
            node: Any = value
            for step in path.split("."):
                node = node.get(step) if isinstance(node, dict) else None
            if node is not None:
                parts.append(node if isinstance(node, str) else json.dumps(node))
        if parts:
            return "\n".join(parts)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Filter:
    """A store filter: a JSON the value contains, and comparisons on fields."""

    contains: dict[str, Any] | None
    compare: list[tuple[list[str], str, Any]]

    def sql(self) -> str:
        return "".join(
            f"\n  AND (data -> 'value' #> ${8 + 2 * i}::text[]) {COMPARE[op]} ${9 + 2 * i}::jsonb"
            for i, (_, op, _) in enumerate(self.compare)
        )

    def args(self) -> list[Any]:
        return [a for path, _, value in self.compare for a in (path, value)]


def parse_filter(filter_: dict[str, Any] | None) -> Filter:
    """``{"field": value}`` (containment, dotted fields nest) or ``{"field": {"$op": v}}``."""
    contains: dict[str, Any] = {}
    compare: list[tuple[list[str], str, Any]] = []
    for field, wanted in (filter_ or {}).items():
        path = field.split(".")
        if isinstance(wanted, dict) and any(str(k).startswith("$") for k in wanted):
            for op, value in wanted.items():
                if op == "$eq":
                    _nest(contains, path, value)
                elif op in COMPARE:
                    compare.append((path, op, value))
                else:
                    raise InvalidRequest(
                        f"filter.{field}: {op!r} is not one of $eq, {', '.join(COMPARE)}"
                    )
        else:
            _nest(contains, path, wanted)
    if len(compare) > MAX_COMPARISONS:
        raise InvalidRequest(f"filter: more than {MAX_COMPARISONS} comparisons")
    return Filter(contains or None, compare)


def _nest(into: dict[str, Any], path: list[str], value: Any) -> None:
    for step in path[:-1]:
        into = into.setdefault(step, {})
    into[path[-1]] = value


async def put(
    pool: asyncpg.Pool,
    publisher: Publisher,
    *,
    user_id: str,
    namespace: list[str],
    key: str,
    value: dict[str, Any],
    index: list[str] | None,
) -> Item:
    ns = namespace_text(namespace)
    item = NewItem(
        type="other",
        content=ms.check_content(index_text(value, index)),
        namespace=ns,
        category=CATEGORY,
        key=key,
        data={"value": value},  # the writer keeps its own notes beside it (data.replaced)
        source="store",
        audit={"namespace": ns, "key": key},
    )
    async with pool.acquire() as conn:
        written = await insert_items(conn, user_id, [item], actor="store")
    await publish_written(publisher, written)
    return await get(pool, user_id=user_id, namespace=namespace, key=key)


async def get(pool: asyncpg.Pool, *, user_id: str, namespace: list[str], key: str) -> Item:
    row = await pool.fetchrow(GET, user_id, namespace_text(namespace), key)
    if row is None:
        raise NotFound(f"no item {key!r} in namespace {namespace!r}")
    return Item.of(row)


async def delete(
    pool: asyncpg.Pool, publisher: Publisher, *, user_id: str, namespace: list[str], key: str
) -> ItemDeleted:
    """Delete the item (its embedding goes with it); a missing one deletes nothing."""
    row = await pool.fetchrow(GET, user_id, namespace_text(namespace), key)
    if row is None:
        return ItemDeleted(deleted=0)
    await ms.delete_memory(pool, publisher, user_id=user_id, item_id=row["id"], actor="store")
    return ItemDeleted(deleted=1)


async def search(
    state: QueryState,
    pool: asyncpg.Pool,
    *,
    user_id: str,
    namespace_prefix: list[str],
    query: str | None,
    filter: dict[str, Any] | None,
    limit: int,
    offset: int,
) -> Hits:
    """Items under the prefix that match, best first (with a query) or newest first."""
    ns = namespace_text(namespace_prefix, "namespace_prefix") if namespace_prefix else None
    where = parse_filter(filter)
    sql, extra = MATCHING.format(compare=where.sql()), where.args()
    args = (user_id, ns, _children(ns), where.contains)
    wanted = offset + limit
    out: list[tuple[Any, Hit]] = []
    if query is not None and not lists_newest(query):
        params = SearchParams(
            query=query, limit=MAX_LIMIT, types=("other",), include_superseded=True
        )
        hits = (await memory_search(state, pool, params, user_id=user_id)).hits
        scores = {h.id: h.score for h in hits}
        rows = await pool.fetch(sql, *args, list(scores), [], len(scores) or 1, *extra)
        ranked = sorted(rows, key=lambda r: (-scores[r["id"]], r["id"]))
        out = [(r["id"], Hit.of(r, score=scores[r["id"]])) for r in ranked[:wanted]]
    if len(out) < wanted:
        seen = [i for i, _ in out]
        rows = await pool.fetch(sql, *args, None, seen, wanted - len(out), *extra)
        out += [(r["id"], Hit.of(r, score=None)) for r in rows]
    return Hits(items=[item for _, item in out[offset:wanted]])


async def namespaces(
    pool: asyncpg.Pool,
    *,
    user_id: str,
    prefix: list[str] | None,
    suffix: list[str] | None,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> NamespaceList:
    """The namespaces holding items, matching a prefix/suffix (``*``: any label),
    cut to ``max_depth`` labels, sorted."""
    found: set[tuple[str, ...]] = set()
    for r in await pool.fetch(NAMESPACES, user_id):
        labels = tuple(r["namespace"].split(SEP))
        if prefix and not _matches(labels[: len(prefix)], prefix):
            continue
        if suffix and (len(labels) < len(suffix) or not _matches(labels[-len(suffix) :], suffix)):
            continue
        found.add(labels[:max_depth] if max_depth is not None else labels)
    return NamespaceList(namespaces=[list(n) for n in sorted(found)[offset : offset + limit]])


def _matches(labels: tuple[str, ...], pattern: list[str]) -> bool:
    return len(labels) == len(pattern) and all(
        p in ("*", a) for a, p in zip(labels, pattern, strict=True)
    )


def _children(ns: str | None) -> str | None:
    if ns is None:
        return None
    escaped = ns.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + SEP + "%"


def _value(data: dict[str, Any]) -> dict[str, Any]:
    """An item's value: ``data.value``; a row written another way (a fact saved under the
    store's category, or before values moved under ``value``) shows its data."""
    value = data.get("value")
    if isinstance(value, dict):
        return value
    return {k: v for k, v in data.items() if k != "replaced"}
