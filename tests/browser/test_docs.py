"""The API docs in headless Chromium with every request off this service blocked:
Swagger UI loads from the service's own assets, authorizes with a key, makes a call."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from playwright.async_api import expect

from shared.apikeys import create_key
from tests.browser.conftest import SCREENSHOTS, UiServer, screenshot
from tests.browser.seed import seed_user
from tests.support import ROOT

pytestmark = pytest.mark.slow

DOCS_SHOT = ROOT / "docs" / "img" / "docs-offline.png"


RENDER_MS = 30_000


async def block_the_network(page: Any, server: UiServer) -> list[str]:
    """Abort every request that is not to the service; return the aborted URLs."""
    ours = urlsplit(server.url).netloc
    blocked: list[str] = []

    async def gate(route: Any) -> None:
        if urlsplit(route.request.url).netloc == ours:
            await route.continue_()
        else:
            blocked.append(route.request.url)
            await route.abort("internetdisconnected")

    await page.context.route("**/*", gate)
    return blocked


async def test_swagger_ui_works_offline_authorizes_and_calls(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    seeded = await seed_user(pool, "docs-reader", "Delta")
    _, secret = await create_key(pool, user_id=seeded.user_id)
    blocked = await block_the_network(page, ui_server)

    await page.goto(f"{ui_server.url}/docs")
    # the bundles parse and render the whole OpenAPI in the page: seconds on a busy
    # machine (ReDoc showed "Loading ..." past the default 5 s at load 8 on 2 cores)
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "engram", timeout=RENDER_MS
    )
    await page.click("button.authorize")
    await page.fill(".modal-ux input[type=text], .modal-ux input[type=password]", secret)
    await page.click(".modal-ux button.authorize")
    modal = page.locator(".modal-ux")
    await expect(modal.get_by_role("heading", name="Authorized")).to_be_visible()
    await modal.get_by_role("button", name="Close").click()

    op = page.locator("#operations-account-me_v1_me_get")
    await op.locator(".opblock-summary").click()
    await op.locator("button.try-out__btn").click()
    await op.locator("button.execute").click()
    status = op.locator(".live-responses-table .response .response-col_status").first
    await expect(status).to_have_text("200")
    body = await op.locator(".live-responses-table .microlight").first.inner_text()
    assert json.loads(body)["user_id"] == "docs-reader"
    await screenshot(page, "docs-offline")
    # the title, the locked Authorize button and the call's answer in one picture
    await page.set_viewport_size({"width": 1280, "height": 1500})
    await page.evaluate("window.scrollTo(0, 0)")
    shot = SCREENSHOTS / "docs-offline-top.png"
    await page.screenshot(path=str(shot))
    if os.environ.get("ENGRAM_UPDATE_DOCS_IMAGES"):  # refresh the picture docs/ shows
        DOCS_SHOT.write_bytes(shot.read_bytes())
    assert blocked == [], blocked  # nothing was even tried off the service

    # ReDoc renders from its bundled script too
    await page.goto(f"{ui_server.url}/redoc")
    await expect(page.locator("h1").first).to_contain_text("engram", timeout=RENDER_MS)
    # its "API docs by Redocly" logo too (it came from cdn.redoc.ly: issue 29.20)
    await expect(page.locator("a[href*='redocly'] img").first).to_be_visible(timeout=RENDER_MS)
    assert blocked == [], blocked
