"""The favicon and ReDoc, from the service's own files (issue 29.19-20).

``fastapi_offline`` serves Swagger UI and ReDoc without a CDN, but ReDoc's bundle
still loads its "API docs by Redocly" logo from ``cdn.redoc.ly``; ``/redoc`` here
serves the same bundle with that logo pointed at the service's own icon.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import FileResponse, HTMLResponse, Response

STATIC = Path(__file__).resolve().parents[2] / "static"  # the service's own files

router = APIRouter(include_in_schema=False)

ICON = "/ui/static/favicon.svg"
REDOC_BUNDLE = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    return FileResponse(
        STATIC / "favicon.svg",
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )


@cache
def _redoc_bundle() -> bytes:
    return REDOC_BUNDLE.read_bytes().replace(REDOC_LOGO.encode(), ICON.encode())


@router.get("/redoc.js")
async def redoc_js() -> Response:
    return Response(
        _redoc_bundle(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=3600"},
    )


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}/openapi.json",
        title="engram - ReDoc",
        redoc_js_url=f"{root}/redoc.js",
        redoc_favicon_url=f"{root}{ICON}",
        with_google_fonts=False,
    )
