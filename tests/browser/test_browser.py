"""The memory browser in headless Chromium against a running query service."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest
from playwright.async_api import expect
from pydantic import SecretStr

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from shared.apikeys import create_key
from tests.browser.conftest import SECRET_KEY, UiServer, screenshot
from tests.browser.seed import EMBED_ERROR, Seeded, seed_user
from tests.embedder.scripted import ScriptedServer, Step
from tests.support import running

pytestmark = pytest.mark.slow


async def two_users(pool: asyncpg.Pool) -> tuple[Seeded, Seeded]:
    tag = uuid.uuid4().hex[:6]
    return (
        await seed_user(pool, f"alice-{tag}", "Alfa"),
        await seed_user(pool, f"bob-{tag}", "Bravo"),
    )


async def log_in(
    page: Any, server: UiServer, pool: asyncpg.Pool, user_id: str, *, shot: str | None = None
) -> None:
    _, secret = await create_key(pool, user_id=user_id)
    await page.goto(f"{server.url}/ui/")
    await expect(page).to_have_url(f"{server.url}/ui/login")
    await page.fill("input[name=key]", secret)
    if shot:
        await screenshot(page, shot)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{server.url}/ui/")


async def test_log_in_filter_by_theme_and_type_and_flip_include_archived(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    alice, _ = await two_users(pool)
    await log_in(page, ui_server, pool, alice.user_id, shot="login")
    # themes with active counts: work holds atlas, pg, broken
    await expect(page.locator("td[data-active=work]")).to_have_text("3")
    await expect(page.locator("td[data-active=health]")).to_have_text("1")  # one archived
    await screenshot(page, "themes")

    await page.click("nav >> text=Memories")
    rows = page.locator("#item-list tr.item")
    await expect(rows).to_have_count(8)  # all 9 but the archived one
    await page.evaluate("window.__loaded_once = 'yes'")

    await page.select_option("select[name=theme]", "work")
    await expect(rows).to_have_count(3)
    await page.select_option("select[name=type]", "fact")
    await expect(rows).to_have_count(2)
    await expect(page.locator("#item-list")).to_contain_text("Project Alfa Atlas ships in May")
    await expect(page.locator("#item-list")).not_to_contain_text("Decided Alfa")

    await page.select_option("select[name=theme]", "health")
    await page.select_option("select[name=type]", "")
    await expect(rows).to_have_count(1)
    archived = page.locator("#item-list tr.item.archived")
    await expect(archived).to_have_count(0)
    await page.check("input[name=archived]")
    await expect(archived).to_have_count(1)
    await expect(archived).to_contain_text("Alfa used to run at night")
    await expect(rows).to_have_count(2)
    # the list was swapped in place: the page (and its window) is the same one
    assert await page.evaluate("window.__loaded_once") == "yes"
    assert "archived=1" in page.url and "theme=health" in page.url
    await screenshot(page, "memories-archived")

    await page.uncheck("input[name=archived]")
    await expect(archived).to_have_count(0)
    assert await page.evaluate("window.__loaded_once") == "yes"

    # the search box runs the hybrid search (full text only here: no provider)
    await page.select_option("select[name=theme]", "")
    searches: list[str] = []
    page.on("request", lambda r: searches.append(r.url) if "q=Bergen" in r.url else None)
    await page.fill("input[name=q]", "Bergen")
    await page.press("input[name=q]", "Enter")
    await expect(page.locator("#item-count")).to_contain_text("mode fts_only")
    await expect(rows).to_have_count(1)
    await page.wait_for_timeout(500)
    assert len(searches) == 1, searches  # Enter sends it once (it sent it twice: 29.19)
    await expect(rows).to_contain_text("Alfa lives in Bergen")
    assert await page.evaluate("window.__loaded_once") == "yes"
    await screenshot(page, "search")


async def test_open_an_item_with_an_embedding_error_and_a_superseded_one(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    alice, _ = await two_users(pool)
    await log_in(page, ui_server, pool, alice.user_id)
    await page.goto(f"{ui_server.url}/ui/memories?state=superseded")
    row = page.locator("tr.item", has_text="Alfa lives in Oslo")
    await expect(row.locator(".replaced")).to_contain_text("superseded by Alfa lives in Bergen")
    await screenshot(page, "memories-superseded")
    await row.locator(".replaced a").click()
    await expect(page.locator("#content")).to_have_text("Alfa lives in Bergen")

    await page.goto(f"{ui_server.url}/ui/memories")
    row = page.locator("tr.item", has_text="Alfa badge number is 4411")
    await expect(row.locator(".state")).to_have_text("error")
    await screenshot(page, "memories")
    await row.locator("td.content a").first.click()
    await expect(page).to_have_url(f"{ui_server.url}/ui/memories/{alice.items['broken']}")
    await expect(page.locator("#embedding .state")).to_have_text("error")
    await expect(page.locator("#embedding-error")).to_have_text(EMBED_ERROR)
    await screenshot(page, "memory-detail")


async def test_settings_test_endpoint_then_save_confirm_and_watch_the_rebuild(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    alice, _ = await two_users(pool)
    scripted = ScriptedServer(dims=8).start()
    try:
        await log_in(page, ui_server, pool, alice.user_id)
        await page.click("nav >> text=Settings")
        await expect(page.locator("#in-effect")).to_contain_text("full-text only")
        await page.select_option("select[name=provider]", "openai")
        await page.fill("input[name=endpoint_url]", scripted.base_url("openai"))
        await page.fill("input[name=model]", "text-embedding-3-small")

        await page.click("#test-endpoint")
        await expect(page.locator("#probe-dims")).to_have_text("8")
        await expect(page.locator("#probe-latency")).to_contain_text("ms")
        path, body, _ = scripted.requests[-1]
        assert path == "/v1/embeddings" and body["model"] == "text-embedding-3-small"
        await screenshot(page, "settings-test-ok")

        scripted.then(Step("status", status=401, message="invalid api key"))
        await page.click("#test-endpoint")
        await expect(page.locator("#probe-error")).to_contain_text("HTTP 401")
        await expect(page.locator("#probe-error")).to_contain_text(
            "refused the API key (HTTP 401)"
        )  # not the body

        # a bad form is refused with the reason, inline
        await page.fill("input[name=endpoint_url]", "ftp://nowhere")
        await page.click("#save")
        await expect(page.locator("#save-message")).to_contain_text("must start with http")
        await page.fill("input[name=endpoint_url]", scripted.base_url("openai"))

        # saving a provider change first asks, with the number of embeddings to rebuild
        await page.click("#save")
        # 9 memories (archived included) + 1 episode summary; no messages
        await expect(page.locator("#rebuild-total")).to_have_text("10")
        stored = await pool.fetchval(
            "SELECT count(*) FROM embedding_settings WHERE user_id = $1", alice.user_id
        )
        assert stored == 0  # nothing saved before the confirmation
        await screenshot(page, "settings-confirm")

        es = EmbedderSettings(
            database_url=SecretStr(str(ui_server.settings.database_url.get_secret_value())),
            redis_url=SecretStr(ui_server.settings.redis_url.get_secret_value()),
            stream_prefix=ui_server.settings.stream_prefix,
            data_dir=ui_server.settings.data_dir,
            embedding_provider="none",
            embedding_endpoint_allow="127.0.0.0/8",  # the scripted provider is on loopback
            secret_key=SecretStr(SECRET_KEY),
            consumer_block_ms=50,
            db_pool_max=2,
        )
        async with running(embedder_app(es)):
            await page.click("#confirm-rebuild")
            await expect(page.locator("#save-message")).to_contain_text("rebuilding 10")
            await expect(page.locator("#in-effect")).to_contain_text("openai")
            await expect(page.locator("#rebuild-finished")).to_be_visible(timeout=30_000)
            await expect(page.locator("#rebuild-progress")).to_have_text("10 / 10")
        await screenshot(page, "settings-rebuilt")
        states = await pool.fetch(
            "SELECT embedding_state, embedding_model, count(*) FROM memory_items "
            "WHERE user_id = $1 GROUP BY 1, 2",
            alice.user_id,
        )
        assert [(r[0], r[1], r[2]) for r in states] == [("ready", "text-embedding-3-small", 9)]
        await page.reload()
        await expect(page.locator("#in-effect")).to_contain_text("openai")
    finally:
        scripted.stop()


async def test_another_users_data_appears_nowhere(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    alice, bob = await two_users(pool)
    await log_in(page, ui_server, pool, alice.user_id)
    shots = {
        "/ui/people": "people",
        "/ui/episodes": "episodes",
        "/ui/reviews": "reviews",
        "/ui/summary": "summary",
        f"/ui/episodes/{alice.episode}": "episode",
        "/ui/settings": "settings",
    }
    paths = [
        "/ui/",
        "/ui/memories?archived=1",
        "/ui/memories?q=lives&archived=1",
        f"/ui/memories?person={alice.person}",
        "/ui/reviews?status=",
        *shots,
        *(f"/ui/memories/{i}" for i in alice.items.values()),
    ]
    for path in paths:
        await page.goto(ui_server.url + path)
        html = await page.content()
        assert "Alfa" in html, path
        assert "Bravo" not in html and bob.user_id not in html, path
        if path in shots:
            await screenshot(page, shots[path])
    await expect(page.locator("#viewing")).to_have_attribute("data-user", alice.user_id)
    # bob's things by their ids: not found, not shown
    for path in (f"/ui/memories/{bob.items['atlas']}", f"/ui/episodes/{bob.episode}"):
        response = await page.goto(ui_server.url + path)
        assert response is not None and response.status == 404
        assert "Bravo" not in await page.content()
    await page.goto(f"{ui_server.url}/ui/memories?person={bob.person}")
    await expect(page.locator("#item-count")).to_contain_text("0 items")


async def test_an_admin_key_picks_one_user_and_sees_only_them(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    alice, bob = await two_users(pool)
    _, secret = await create_key(pool, user_id=None, is_admin=True)
    await page.goto(f"{ui_server.url}/ui/login")
    await page.fill("input[name=key]", secret)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{ui_server.url}/ui/users")
    await page.fill("#prefix", bob.user_id)  # narrows the list in place
    rows = page.locator("#user-list tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows).to_contain_text(bob.user_id)
    await screenshot(page, "users")
    await rows.locator("button").click()
    await expect(page).to_have_url(f"{ui_server.url}/ui/")
    await expect(page.locator("#viewing")).to_have_attribute("data-user", bob.user_id)
    await page.goto(f"{ui_server.url}/ui/memories?archived=1")
    await expect(page.locator("#item-list tr.item")).to_have_count(9)
    assert "Alfa" not in await page.content() and alice.user_id not in await page.content()


async def test_saving_an_endpoint_that_fails_its_test_needs_save_anyway(
    page: Any, ui_server: UiServer, pool: asyncpg.Pool
) -> None:
    alice, _ = await two_users(pool)
    scripted = ScriptedServer(dims=8).start()
    try:
        await log_in(page, ui_server, pool, alice.user_id)
        await page.goto(f"{ui_server.url}/ui/settings")
        await page.select_option("select[name=provider]", "openai")
        await page.fill("input[name=endpoint_url]", scripted.base_url("openai"))
        await page.fill("input[name=model]", "text-embedding-3-small")
        scripted.then(Step("status", status=401, message="invalid api key"))
        await page.click("#save")
        await expect(page.locator("#untested-error")).to_contain_text("HTTP 401")
        stored = await pool.fetchval(
            "SELECT count(*) FROM embedding_settings WHERE user_id = $1", alice.user_id
        )
        assert stored == 0  # the failed endpoint was not saved
        await screenshot(page, "settings-untested")
        await page.click("#save-untested")  # then the usual rebuild confirmation
        await expect(page.locator("#rebuild-total")).to_have_text("10")
        await page.click("#confirm-rebuild")
        await expect(page.locator("#save-message")).to_contain_text("rebuilding 10")
        stored = await pool.fetchval(
            "SELECT endpoint_url FROM embedding_settings WHERE user_id = $1", alice.user_id
        )
        assert stored == scripted.base_url("openai")
    finally:
        scripted.stop()


async def test_pages_fit_a_phone(browser: Any, ui_server: UiServer, pool: asyncpg.Pool) -> None:
    alice, _ = await two_users(pool)
    context = await browser.new_context(viewport={"width": 375, "height": 740})
    page = await context.new_page()
    page.set_default_timeout(15_000)
    try:
        await log_in(page, ui_server, pool, alice.user_id)
        for path in ("/ui/memories?archived=1", "/ui/people", "/ui/episodes", "/ui/settings"):
            await page.goto(ui_server.url + path)
            width = await page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (path, width)
        await page.goto(ui_server.url + "/ui/memories?archived=1")
        # the list is wider than the phone: it says it scrolls sideways (issue 29.19)
        hint = await page.evaluate(
            "(() => { const t = document.querySelector('#item-list table');"
            " return [t.scrollWidth > t.clientWidth,"
            " getComputedStyle(t, '::before').content]; })()"
        )
        assert hint[0] is True and "swipe the table sideways" in hint[1], hint
        await screenshot(page, "memories-phone")
        await page.set_viewport_size({"width": 1280, "height": 740})  # wide: no hint
        await page.wait_for_timeout(200)
        wide = await page.evaluate(
            "getComputedStyle(document.querySelector('#item-list table'), '::before').content"
        )
        assert "swipe" not in wide, wide
    finally:
        await context.close()
