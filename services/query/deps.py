"""FastAPI dependencies for the process's runtime objects."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from fastapi import Depends, Request

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
