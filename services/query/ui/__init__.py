"""The memory browser: a read-only web UI under ``/ui`` (Jinja2 pages, HTMX fragments).

Mounted by ``create_app`` after the API routers; see ``docs/browser.md``.
"""

from __future__ import annotations

from fastapi import APIRouter

from services.query.ui import pages, session, settings_page
from services.query.ui.web import static_file

router = APIRouter(prefix="/ui", include_in_schema=False)
router.add_api_route("/static/{name}", static_file, methods=["GET"])
router.include_router(session.router)
router.include_router(pages.router)
router.include_router(settings_page.router)
