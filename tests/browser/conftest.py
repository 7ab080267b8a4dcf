"""A real query service (a process on a free port) and headless Chromium driven by
Playwright. Chromium is Debian's package (``.ci/run`` installs it); Playwright
downloads no browser. Screenshots go to ``test-output/screenshots/``."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from engram_cli.embedded import free_port
from services.query.settings import QuerySettings
from tests.conftest import Infra
from tests.support import ROOT, start_service, wait_healthy

CHROMIUM = Path("/usr/bin/chromium")
# The network is closed here: without these Chromium keeps dialling Google services.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
SECRET_KEY = "browser-tests-secret"


@dataclass
class UiServer:
    url: str
    settings: QuerySettings
    env: dict[str, str]


@pytest.fixture(scope="module")
async def ui_server(infra: Infra) -> AsyncIterator[UiServer]:
    port = free_port()
    settings = QuerySettings(
        database_url=SecretStr(infra.database_url),
        redis_url=SecretStr(infra.redis_url),
        stream_prefix=f"b{uuid.uuid4().hex[:8]}:",
        data_dir=infra.data_dir,
        query_port=port,
        log_level="WARNING",
    )
    # users' own endpoints are in effect (no system provider, so no local model either)
    env = {
        "ENGRAM_EMBEDDING_PROVIDER": "none",
        "ENGRAM_SECRET_KEY": SECRET_KEY,
        "ENGRAM_EMBEDDING_RETRIES": "0",
        # the scripted providers listen on loopback (shared/outbound.py)
        "ENGRAM_EMBEDDING_ENDPOINT_ALLOW": "127.0.0.0/8",
    }
    proc = start_service("query", settings, **env)
    try:
        await wait_healthy(port, proc)
        yield UiServer(f"http://127.0.0.1:{port}", settings, env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    if not CHROMIUM.exists():  # noqa: ASYNC240 - one stat, before anything runs
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (.ci/run does)")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    p = await context.new_page()
    p.set_default_timeout(15_000)
    try:
        yield p
    finally:
        await context.close()


async def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path
