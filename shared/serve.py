"""Run one service's ASGI app with uvicorn, with engram's logging."""

from __future__ import annotations

import logging

import uvicorn
from fastapi import FastAPI

from shared.settings import CommonSettings


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def serve(app: FastAPI, settings: CommonSettings, *, port: int) -> None:
    """uvicorn with uvloop and httptools (dependencies; "auto" takes them): every
    request, database reply and stream read costs less CPU than on asyncio's own loop
    and the pure-Python h11 parser (docs/query.md, "The add ack")."""
    setup_logging(settings.log_level)
    uvicorn.run(
        app,
        host=settings.host,
        port=port,
        log_level=settings.log_level.lower(),
        access_log=False,
        lifespan="on",
        loop="auto",
        http="auto",
    )
