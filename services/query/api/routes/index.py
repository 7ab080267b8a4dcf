"""The service's front door: ``/`` and ``/v1/`` say where everything is (no key needed)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

router = APIRouter(tags=["ops"])


class ServiceIndex(BaseModel):
    """Links to the API reference, the browser and the ops endpoints."""

    service: str = "engram"
    api: str = Field(description="base of the agent API; every call needs a Bearer key")
    docs: str = Field(description="interactive API reference (Swagger UI)")
    redoc: str
    openapi: str = Field(description="the OpenAPI document")
    mcp: str = Field(description="the memory tools over MCP (streamable HTTP, Bearer key)")
    browser: str = Field(description="the read-only memory browser")
    health: str
    metrics: str
    key: str = Field(description="how to get a key")


def _index(request: Request) -> ServiceIndex:
    base = str(request.base_url).rstrip("/")
    return ServiceIndex(
        api=f"{base}/v1/",
        docs=f"{base}/docs",
        redoc=f"{base}/redoc",
        openapi=f"{base}/openapi.json",
        mcp=f"{base}/mcp",
        browser=f"{base}/ui/",
        health=f"{base}/health",
        metrics=f"{base}/metrics",
        key="engram keys create --user <user id>  (prints the secret once)",
    )


@router.get("/", summary="Where the API, its docs and the browser are")
async def root(request: Request) -> ServiceIndex:
    return _index(request)


@router.get("/v1", summary="Where the API, its docs and the browser are")
@router.get("/v1/", include_in_schema=False)
async def api_root(request: Request) -> ServiceIndex:
    return _index(request)
