"""FastAPI dependencies for the process's runtime objects.

The plain functions read an object off the request (callable anywhere); the
annotated aliases (``Pool``, ``State``, ...) depend on their ``async`` twins:
FastAPI runs a synchronous dependency in a worker thread, a hop to the thread
pool and back on every request for what is an attribute read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from services.query.api.auth import UserId
from services.query.api.replica import ReadRouting
from services.query.memory.state import QueryState
from services.query.settings import QuerySettings
from shared.runtime import Runtime
from shared.streams import Publisher


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def pool(request: Request) -> asyncpg.Pool:
    return runtime(request).pool


def publisher(request: Request) -> Publisher:
    return runtime(request).publisher


def query_state(request: Request) -> QueryState:
    state: QueryState = request.app.state.query
    return state


def settings(request: Request) -> QuerySettings:
    """The service's settings: built once in ``create_app``, the one way routes read them."""
    return query_state(request).settings


async def _runtime(request: Request) -> Runtime:
    return runtime(request)


async def _pool(request: Request) -> AsyncIterator[asyncpg.Pool]:
    """The primary. With a read replica configured, a request other than a GET keeps its
    acting user's write position once the route is done, before its response is sent
    (read-your-writes, services/query/api/replica.py)."""
    try:
        yield pool(request)
    finally:
        reads: ReadRouting = request.app.state.reads
        user = getattr(request.state, "acting_user", None)
        if reads.enabled and user is not None and request.method not in ("GET", "HEAD"):
            await reads.remember(user)


async def _read_pool(request: Request, user_id: UserId) -> asyncpg.Pool:
    """The primary or the replica for a read by ``user_id`` (replica.ReadRouting)."""
    reads: ReadRouting = request.app.state.reads
    if not reads.enabled:
        return pool(request)
    return await reads.pool_for(user_id, request.scope.setdefault("state", {}))


async def _publisher(request: Request) -> Publisher:
    return publisher(request)


async def _query_state(request: Request) -> QueryState:
    return query_state(request)


async def _settings(request: Request) -> QuerySettings:
    return settings(request)


Rt = Annotated[Runtime, Depends(_runtime)]
Pool = Annotated[asyncpg.Pool, Depends(_pool, scope="function")]
ReadPool = Annotated[asyncpg.Pool, Depends(_read_pool)]
"""A read route's pool: the replica when it has the user's writes, else the primary"""
Pub = Annotated[Publisher, Depends(_publisher)]
State = Annotated[QueryState, Depends(_query_state)]
Settings = Annotated[QuerySettings, Depends(_settings)]
