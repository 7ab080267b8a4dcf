"""FastAPI dependencies for the process's runtime objects."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from services.query.settings import QuerySettings
from services.query.state import QueryState
from shared.runtime import Runtime
from shared.streams import Publisher


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def pool(request: Request) -> asyncpg.Pool:
    return runtime(request).pool


def publisher(request: Request) -> Publisher:
    return runtime(request).publisher


Rt = Annotated[Runtime, Depends(runtime)]
Pool = Annotated[asyncpg.Pool, Depends(pool)]
Pub = Annotated[Publisher, Depends(publisher)]


def query_state(request: Request) -> QueryState:
    state: QueryState = request.app.state.query
    return state


State = Annotated[QueryState, Depends(query_state)]


def settings(request: Request) -> QuerySettings:
    """The service's settings: built once in ``create_app``, the one way routes read them."""
    return query_state(request).settings


Settings = Annotated[QuerySettings, Depends(settings)]
