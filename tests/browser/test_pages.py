"""The browser's pages in-process (no browser): login, one user per page, bad input."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest

from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key, revoke_key, session_token
from shared.embeddings.crypto import signing_key
from shared.memory.writer import NewItem, insert_items
from tests.browser.seed import EMBED_ERROR, Seeded, seed_user
from tests.embedder.conftest import add_messages
from tests.query.helpers import FixedEmbedder, resolver_for, set_vector, unit
from tests.support import running

PAGES = [
    "/ui/",
    "/ui/memories",
    "/ui/memories?archived=1",
    "/ui/people",
    "/ui/episodes",
    "/ui/reviews",
    "/ui/summary",
    "/ui/settings",
]


@pytest.fixture
async def client(make_settings: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    # full-text only: no query embedder (the system provider would load the local model)
    async with running(create_app(make_settings(QuerySettings), resolver=resolver_for(None))) as c:
        yield c


@pytest.fixture
async def two_users(pool: asyncpg.Pool) -> tuple[Seeded, Seeded]:
    tag = uuid.uuid4().hex[:6]
    return (
        await seed_user(pool, f"alice-{tag}", "Alfa"),
        await seed_user(pool, f"bob-{tag}", "Bravo"),
    )


async def login(client: httpx.AsyncClient, pool: asyncpg.Pool, user_id: str | None) -> str:
    _, secret = await create_key(pool, user_id=user_id, is_admin=user_id is None)
    r = await client.post("/ui/login", data={"key": secret})
    assert r.status_code == 303
    return secret


async def test_pages_redirect_to_login_without_a_key(client: httpx.AsyncClient) -> None:
    for path in PAGES:
        r = await client.get(path)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login", path
    r = await client.get("/ui/memories", headers={"HX-Request": "true"})
    assert r.headers["hx-redirect"] == "/ui/login"
    assert (await client.get("/ui/login")).status_code == 200


async def test_a_wrong_key_is_refused_with_a_message(client: httpx.AsyncClient) -> None:
    r = await client.post("/ui/login", data={"key": "eg_nope_nope"})
    assert r.status_code == 401 and "Unknown or revoked API key" in r.text
    assert "engram_session" not in r.headers.get("set-cookie", "")


async def test_login_sets_a_strict_http_only_cookie_scoped_to_the_ui(
    client: httpx.AsyncClient, pool: asyncpg.Pool, user_id: str
) -> None:
    _, secret = await create_key(pool, user_id=user_id)
    r = await client.post("/ui/login", data={"key": secret})
    cookie = r.headers["set-cookie"]
    assert r.status_code == 303 and r.headers["location"] == "/ui/"
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # cookie_secure is off in tests
    r = await client.post("/ui/logout")
    assert r.status_code == 303
    assert (await client.get("/ui/")).status_code == 303


async def test_the_cookie_holds_a_bounded_session_not_the_key(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 29.14: the cookie is a signed session for the browser only; /v1 and /mcp
    refuse it; it ends at its expiry, when forged, and when the key is revoked."""
    s = make_settings(QuerySettings)
    async with running(create_app(s, resolver=resolver_for(None))) as client:
        await _session_checks(client, pool, user_id, signing_key(s, "ui-session"))


async def _session_checks(
    client: httpx.AsyncClient, pool: asyncpg.Pool, user_id: str, signing: bytes
) -> None:
    key, secret = await create_key(pool, user_id=user_id)
    r = await client.post("/ui/login", data={"key": secret})
    token = client.cookies["engram_session"]
    assert secret not in r.headers["set-cookie"] and not token.startswith("eg_")
    assert "Max-Age=43200" in r.headers["set-cookie"]  # 12 hours
    assert (await client.get("/ui/")).status_code == 200
    for path in ("/v1/me", "/v1/tools"):
        r = await client.get(path, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401, path
        r = await client.get(
            path, headers={"Cookie": f"engram_session={token}; engram_key={token}"}
        )
        assert r.status_code == 401, path
    r = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 401
    body, _, signature = token.rpartition(".")
    version, key_id, expires = body.split(".")
    for forged in (
        f"{version}.{key_id}.{int(expires) + 10**6}.{signature}",  # a longer life
        session_token(key, b"another deployment's key", 3600),
        session_token(key, signing, -1),  # expired
        secret,  # the raw key is no session either
    ):
        client.cookies.set("engram_session", forged, path="/ui")
        assert (await client.get("/ui/")).status_code == 303, forged
    client.cookies.set("engram_session", token, path="/ui")
    assert (await client.get("/ui/")).status_code == 200
    await revoke_key(pool, key.prefix)
    assert (await client.get("/ui/")).status_code == 303


async def test_every_page_shows_the_users_data_and_nothing_of_another(
    client: httpx.AsyncClient, pool: asyncpg.Pool, two_users: tuple[Seeded, Seeded]
) -> None:
    alice, bob = two_users
    await login(client, pool, alice.user_id)
    seen = ""
    for path in (
        PAGES
        + [f"/ui/memories/{i}" for i in alice.items.values()]
        + [
            f"/ui/episodes/{alice.episode}",
            f"/ui/memories?person={alice.person}",
            "/ui/reviews?status=",
            "/ui/memories?q=lives",
        ]
    ):
        r = await client.get(path)
        assert r.status_code == 200, (path, r.text[:300])
        assert "Bravo" not in r.text and bob.user_id not in r.text, path
        seen += r.text
    for text in (
        "Project Alfa Atlas ships in May",
        "SarahAlfa",
        "Planned the Alfa garden",
        "Alfa may own a sailboat",
        "works on Project Alfa Atlas",
        EMBED_ERROR,
    ):
        assert text in seen
    # bob's rows are not found by id either
    for path in (f"/ui/memories/{bob.items['atlas']}", f"/ui/episodes/{bob.episode}"):
        assert (await client.get(path)).status_code == 404
    r = await client.get(f"/ui/memories?person={bob.person}")
    assert "SarahBravo" not in r.text and "0 items" in r.text


async def test_archived_rows_only_with_the_switch(
    client: httpx.AsyncClient, pool: asyncpg.Pool, two_users: tuple[Seeded, Seeded]
) -> None:
    alice, _ = two_users
    await login(client, pool, alice.user_id)
    off = (await client.get("/ui/memories")).text
    on = (await client.get("/ui/memories?archived=1", headers={"HX-Request": "true"})).text
    assert "Alfa used to run at night" not in off
    assert "Alfa used to run at night" in on and "<html" not in on  # a fragment
    work = (await client.get("/ui/memories?theme=work&type=fact")).text
    assert "Project Alfa Atlas" in work and "Decided Alfa" not in work
    assert "Alfa lives in Bergen" not in work
    sup = (await client.get("/ui/memories?state=superseded")).text
    assert "Alfa lives in Oslo" in sup and f"/ui/memories/{alice.items['bergen']}" in sup


async def test_pages_are_keyset_paged(
    client: httpx.AsyncClient, pool: asyncpg.Pool, user_id: str
) -> None:
    await pool.execute("INSERT INTO users (id) VALUES ($1)", user_id)
    async with pool.acquire() as conn:
        notes = [NewItem(type="fact", content=f"note {i}") for i in range(1, 121)]
        written = await insert_items(conn, user_id, notes, actor="test")
    await pool.executemany(
        "UPDATE memory_items SET created_at = now() - $2 * interval '1 minute' WHERE id = $1",
        [(w.id, i) for i, w in enumerate(written.items, start=1)],
    )
    await login(client, pool, user_id)
    seen: list[str] = []
    url = "/ui/memories"
    for _ in range(3):
        r = await client.get(url)
        import re

        seen += re.findall(r">note (\d+)<", r.text)
        nxt = re.search(r'id="next-page" href="([^"]+)"', r.text)
        if not nxt:
            break
        url = nxt.group(1).replace("&amp;", "&")
    assert seen == [str(i) for i in range(1, 121)]


async def test_bad_input_is_a_400_with_a_message(
    client: httpx.AsyncClient, pool: asyncpg.Pool, two_users: tuple[Seeded, Seeded]
) -> None:
    alice, _ = two_users
    await login(client, pool, alice.user_id)
    for path, message in (
        ("/ui/memories?type=poem", "type must be one of"),
        ("/ui/memories?after=yesterday", "is not a page position"),
        ("/ui/memories?person=x", "is not an id"),
        ("/ui/memories/not-a-uuid", "is not an id"),
        ("/ui/people?offset=-1", "offset must be"),
        ("/ui/reviews?status=maybe", "status must be one of"),
    ):
        r = await client.get(path)
        assert r.status_code == 400 and message in r.text, path
    assert (await client.get(f"/ui/memories/{uuid.uuid4()}")).status_code == 404


async def test_an_admin_key_picks_one_user_first(
    client: httpx.AsyncClient, pool: asyncpg.Pool, two_users: tuple[Seeded, Seeded]
) -> None:
    alice, bob = two_users
    _, secret = await create_key(pool, user_id=None, is_admin=True)
    r = await client.post("/ui/login", data={"key": secret})
    assert r.headers["location"] == "/ui/users"
    assert (await client.get("/ui/")).headers["location"] == "/ui/users"
    listing = (await client.get("/ui/users", params={"prefix": alice.user_id})).text
    assert alice.user_id in listing and bob.user_id not in listing
    r = await client.post("/ui/users", data={"user_id": bob.user_id})
    assert r.status_code == 303
    page = (await client.get("/ui/memories")).text
    assert "Bravo lives in Bergen" in page and "Alfa" not in page
    assert (await client.post("/ui/users", data={"user_id": "nobody-x"})).status_code == 404


async def test_a_user_key_cannot_pick_another_user(
    client: httpx.AsyncClient, pool: asyncpg.Pool, two_users: tuple[Seeded, Seeded]
) -> None:
    alice, bob = two_users
    await login(client, pool, alice.user_id)
    assert (await client.post("/ui/users", data={"user_id": bob.user_id})).status_code == 403
    client.cookies.set("engram_user", bob.user_id, path="/ui")
    page = (await client.get("/ui/memories")).text
    assert "Alfa lives in Bergen" in page and "Bravo" not in page


async def test_cross_site_posts_are_refused(
    client: httpx.AsyncClient, pool: asyncpg.Pool, user_id: str
) -> None:
    _, secret = await create_key(pool, user_id=user_id)
    r = await client.post(
        "/ui/login", data={"key": secret}, headers={"Origin": "https://evil.example"}
    )
    assert r.status_code == 403
    r = await client.post(
        "/ui/login", data={"key": secret}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert r.status_code == 403


async def test_a_favicon_is_served_and_redoc_loads_nothing_from_a_cdn(
    client: httpx.AsyncClient, pool: asyncpg.Pool, user_id: str
) -> None:
    """Issue 29.19 (the favicon was a 404) and 29.20 (ReDoc's logo came from a CDN)."""
    for path in ("/favicon.ico", "/ui/static/favicon.svg"):
        r = await client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg")
    await login(client, pool, user_id)
    assert 'rel="icon" href="/ui/static/favicon.svg"' in (await client.get("/ui/")).text
    page = await client.get("/redoc")
    assert page.status_code == 200
    assert "https://" not in page.text.replace("https://redocly", ""), page.text
    bundle = await client.get("/redoc.js")
    assert bundle.status_code == 200 and len(bundle.content) > 100_000
    assert b"cdn.redoc.ly" not in bundle.content
    assert b"/ui/static/favicon.svg" in bundle.content


async def test_a_persons_first_mention_is_the_conversations_time_not_the_import(
    client: httpx.AsyncClient, pool: asyncpg.Pool, two_users: tuple[Seeded, Seeded]
) -> None:
    """Issue 29.19: a conversation of 2023 imported today says 2023."""
    alice, _ = two_users
    [turn] = await add_messages(pool, alice.user_id, [f"{alice.marker} Sarah hates peanuts"])
    await pool.execute(
        "UPDATE messages SET occurred_at = '2023-05-08 13:56+00' WHERE id = $1", turn
    )
    await pool.execute(
        "UPDATE memory_items SET source_message_id = $2 WHERE id = $1", alice.items["sarah"], turn
    )
    await login(client, pool, alice.user_id)
    page = (await client.get("/ui/people")).text
    row = page[page.index(f"Sarah{alice.marker}") :]
    row = row[: row.index("</tr>")]
    assert "2023-05-08" in row, row


async def test_search_lists_only_relevant_matches_not_fifty_rows_down_to_score_zero(
    make_settings: Callable[..., Any], pool: asyncpg.Pool
) -> None:
    """Issue 29.19: the search box's floor is the context's relevance (cosine >= 0.3 or a
    word of the query): a query that means nothing to the memories lists none of them,
    a real one still finds its memory."""
    user = f"floor-{uuid.uuid4().hex[:8]}"
    await pool.execute("INSERT INTO users (id) VALUES ($1)", user)
    tea = unit(1)
    asked = "what do I have at breakfast"
    async with pool.acquire() as conn:
        await insert_items(
            conn,
            user,
            [NewItem(type="fact", content=f"note number {i} about errands") for i in range(30)]
            + [NewItem(type="preference", content="green tea first thing")],
            actor="test",
        )
    for n, r in enumerate(
        await pool.fetch("SELECT id, content FROM memory_items WHERE user_id = $1", user)
    ):
        await set_vector(pool, r["id"], tea if "tea" in r["content"] else unit(100 + n))
    # the real question is near the tea memory (cosine ~0.96); any other text gets an
    # unrelated vector (cosine ~0 +- 0.05 with every memory)
    embedder = FixedEmbedder({asked: unit(2, near=tea, noise=0.3)})
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(embedder))
    async with running(app) as client:
        await login(client, pool, user)
        nonsense = await client.get("/ui/memories", params={"q": "zorblax quintessa"})
        real = await client.get("/ui/memories", params={"q": asked})
    assert nonsense.status_code == 200 and real.status_code == 200
    assert "0 best matches for" in nonsense.text, nonsense.text[:2000]
    assert "errands" not in nonsense.text and "0.000</td>" not in nonsense.text
    assert "1 best match for" in real.text and "green tea first thing" in real.text
    assert "errands" not in real.text
