"""LangGraph's store on engram's memory: put, get, delete, search, namespaces."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from services.query.api import responses as R
from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub, State
from services.query.api.edges import ErrorOut
from services.query.embeddings.query import OptionalSearchText
from services.query.memory import graph_store as gs

router = APIRouter(prefix="/v1/store", tags=["store (LangGraph)"])

Label = Annotated[str, Field(min_length=1, max_length=255)]
Namespace = Annotated[list[Label], Field(min_length=1, max_length=20)]
Key = Annotated[str, Field(min_length=1, max_length=1000)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemKeyIn(_Body):
    namespace: Namespace
    key: Key


class ItemIn(ItemKeyIn):
    value: dict[str, Any]
    index: Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=50)] | None = (
        Field(default=None, description="the value's fields to embed (dotted); none: all of it")
    )


class StoreSearchIn(_Body):
    namespace_prefix: Annotated[list[Label], Field(max_length=20)] = []
    query: OptionalSearchText = None
    filter: dict[str, Any] | None = Field(
        default=None, description='values that contain this ({"field": value} or $eq)'
    )
    limit: Annotated[int, Field(ge=1, le=100)] = 10
    offset: Annotated[int, Field(ge=0, le=10_000)] = 0


class NamespacesIn(_Body):
    prefix: Annotated[list[Label], Field(max_length=20)] | None = None
    suffix: Annotated[list[Label], Field(max_length=20)] | None = None
    max_depth: Annotated[int | None, Field(ge=1, le=20)] = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    offset: Annotated[int, Field(ge=0)] = 0


# The use cases' results (services.query.memory.graph_store), under the API's names.


class StoreItemOut(gs.Item, R.Out):
    pass


class StoreHitOut(gs.Hit, StoreItemOut):
    pass


class StoreHitsOut(gs.Hits, R.Out):
    items: list[StoreHitOut]  # type: ignore[assignment]


class NamespaceListOut(gs.NamespaceList, R.Out):
    pass


class ItemDeletedOut(gs.ItemDeleted, R.Out):
    pass


@router.put(
    "/items", summary="Save an item's value under (namespace, key)", response_model=StoreItemOut
)
async def put(body: ItemIn, user_id: UserId, pool: Pool, pub: Pub) -> gs.Item:
    return await gs.put(pool, pub, user_id=user_id, **body.model_dump())


@router.post(
    "/items/get",
    summary="One item by (namespace, key)",
    response_model=StoreItemOut,
    responses={404: {"model": ErrorOut, "description": "No item at that namespace and key"}},
)
async def get(body: ItemKeyIn, user_id: UserId, pool: Pool) -> gs.Item:
    return await gs.get(pool, user_id=user_id, namespace=body.namespace, key=body.key)


@router.post(
    "/items/delete", summary="Delete an item (0 when there was none)", response_model=ItemDeletedOut
)
async def delete(body: ItemKeyIn, user_id: UserId, pool: Pool, pub: Pub) -> gs.ItemDeleted:
    return await gs.delete(pool, pub, user_id=user_id, namespace=body.namespace, key=body.key)


@router.post(
    "/search",
    summary="Items under a namespace prefix: by relevance to a query, or newest first",
    response_model=StoreHitsOut,
)
async def search(body: StoreSearchIn, user_id: UserId, pool: Pool, state: State) -> gs.Hits:
    return await gs.search(state, pool, user_id=user_id, **body.model_dump())


@router.post(
    "/namespaces",
    summary="The namespaces holding items (prefix/suffix with '*', max depth)",
    response_model=NamespaceListOut,
)
async def namespaces(body: NamespacesIn, user_id: UserId, pool: Pool) -> gs.NamespaceList:
    return await gs.namespaces(pool, user_id=user_id, **body.model_dump())
