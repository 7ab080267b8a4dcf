"""Rendering for the memory browser: templates (autoescaped), static files, HTML errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import HTTPException, Request, status
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates
from jinja2 import select_autoescape

from shared.text import clip

PACKAGE = Path(__file__).resolve().parent.parent
STATIC = PACKAGE / "static"
STATIC_FILES = {
    "htmx.min.js": "text/javascript",
    "browser.css": "text/css",
    "favicon.svg": "image/svg+xml",
}

templates = Jinja2Templates(directory=PACKAGE / "templates")
templates.env.autoescape = select_autoescape(default=True, default_for_string=True)


def _when(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _short(value: object, n: int = 8) -> str:
    return str(value)[:n]


def _clip(text: str | None, n: int = 160) -> str:
    if not text:
        return ""
    return clip(text, n)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _query(base: dict[str, Any], **changes: Any) -> str:
    """``?a=1&b=2`` from a dict of parameters, dropping empty ones."""
    merged = {**base, **changes}
    kept = {k: v for k, v in merged.items() if v not in (None, "", False)}
    return "?" + urlencode(kept) if kept else ""


templates.env.filters.update(when=_when, short=_short, clip=_clip, pretty=_pretty)
templates.env.globals.update(query=_query)


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def render(
    request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    response.headers["Cache-Control"] = "no-store"
    return response


def error_page(request: Request, message: str, *, status_code: int) -> HTMLResponse:
    """A 4xx page (or, for an HTMX request, the fragment) that says what was wrong."""
    name = "_error.html" if is_htmx(request) else "error.html"
    return render(
        request, name, {"message": message, "status": status_code}, status_code=status_code
    )


async def static_file(name: str) -> FileResponse:
    media = STATIC_FILES.get(name)
    if media is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no static file {name!r}")
    return FileResponse(
        STATIC / name, media_type=media, headers={"Cache-Control": "public, max-age=3600"}
    )


def same_origin(request: Request) -> None:
    """CSRF guard for the browser's POST forms, on top of the SameSite=strict cookie:
    a request another site's page made is refused."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-site form posts are refused")
    origin = request.headers.get("origin")
    if origin and (origin == "null" or urlsplit(origin).netloc != request.headers.get("host")):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-site form posts are refused")
