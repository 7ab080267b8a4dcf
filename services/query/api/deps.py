"""FastAPI dependencies for the process's runtime objects.

The plain functions read an object off the request (callable anywhere); the
annotated aliases (``Pool``, ``State``, ...) depend on their ``async`` twins:
FastAPI runs a synchronous dependency in a worker thread, a hop to the thread
pool and back on every request for what is an attribute read.
"""

from __future__ import annotations

from typing import Annotated

import asyncpg
from fastapi import Depends, Request

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


async def _pool(request: Request) -> asyncpg.Pool:
    return pool(request)


async def _publisher(request: Request) -> Publisher:
    return publisher(request)


async def _query_state(request: Request) -> QueryState:
    return query_state(request)


async def _settings(request: Request) -> QuerySettings:
    return settings(request)


Rt = Annotated[Runtime, Depends(_runtime)]
Pool = Annotated[asyncpg.Pool, Depends(_pool)]
Pub = Annotated[Publisher, Depends(_publisher)]
State = Annotated[QueryState, Depends(_query_state)]
Settings = Annotated[QuerySettings, Depends(_settings)]
