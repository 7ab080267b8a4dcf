"""Webhooks on real PostgreSQL with a real HTTP receiver on loopback: events from the
transactional outbox delivered at least once, signed, through receiver faults; the
dead list and replay; a sender that dies between commit and delivery; the URL guard;
erasure."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engram_cli.embedded import free_port
from services.query.app import create_app
from services.query.settings import QuerySettings
from services.query.webhooks.sender import CLAIM, SIGNATURE_HEADER
from shared.memory.writer import NewItem, insert_items
from tests.query.helpers import admin_auth, auth, resolver_for
from tests.support import running

FAST = {
    "webhook_endpoint_allow": "127.0.0.0/8",
    "webhook_poll_ms": 20,
    "webhook_timeout_s": 0.5,
    "webhook_backoff_s": 0.05,
    "webhook_backoff_max_s": 0.2,
    "webhook_max_attempts": 4,
    "warm_up": False,
}


class Receiver:
    """An HTTP server that records what it is sent; ``script`` says how to answer the
    next requests ("ok", "fail" for a 500, "slow" for an answer after the timeout)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.received: list[tuple[dict[str, str], bytes, float]] = []
        self.answered: list[tuple[bytes, int]] = []  # in the order answered
        self.script: list[str] = []
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task[None] | None = None

    async def hook(self, request: Request) -> Response:
        body = await request.body()
        self.received.append((dict(request.headers), body, time.time()))
        step = self.script.pop(0) if self.script else "ok"
        if step == "slow":
            await asyncio.sleep(1.5)
        status = 500 if step == "fail" else 200
        self.answered.append((body, status))
        return Response("the receiver's own words, never stored" * 10, status_code=status)

    async def start(self) -> None:
        app = Starlette(routes=[Route("/hook", self.hook, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:  # noqa: ASYNC110 - uvicorn offers no event
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        assert self.server is not None and self.task is not None
        self.server.should_exit = True
        await self.task

    def delivered(self) -> list[dict[str, Any]]:
        """Bodies answered 2xx, in order."""
        return [json.loads(body) for body, status in self.answered if status == 200]

    async def wait_for(self, n: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.delivered()) < n:
            assert time.monotonic() < deadline, f"{len(self.delivered())} of {n} delivered"
            await asyncio.sleep(0.02)
        return self.delivered()


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        if r.server is not None and not r.server.should_exit:
            await r.stop()


def verify(headers: dict[str, str], body: bytes, secret: str) -> bool:
    parts = dict(p.split("=", 1) for p in headers[SIGNATURE_HEADER.lower()].split(","))
    mac = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256)
    return hmac.compare_digest(mac.hexdigest(), parts["v1"])


async def subscribe(client: Any, headers: dict[str, str], url: str, **extra: Any) -> dict:
    r = await client.post("/v1/webhooks", json={"url": url, **extra}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def deliveries_when(client: Any, headers: dict[str, str], sub: str, status: str) -> list:
    """The subscription's deliveries in ``status``, once there are some."""
    deadline = time.monotonic() + 15
    while True:
        r = await client.get(f"/v1/webhooks/{sub}/deliveries?status={status}", headers=headers)
        found = r.json()["deliveries"]
        if found:
            return list(found)
        assert time.monotonic() < deadline, f"no {status} delivery"
        await asyncio.sleep(0.05)


async def test_changes_are_delivered_signed_once_each_and_only_to_their_user(
    pool, make_settings, user_id
):
    settings = make_settings(QuerySettings, **FAST)
    async with receiver() as rx, running(create_app(settings, resolver=resolver_for(None))) as c:
        mine = await auth(pool, user_id)
        other = await auth(pool, f"{user_id}-other")
        sub = await subscribe(c, mine, rx.url)
        assert sub["secret"].startswith("whsec_") and sub["user_id"] == user_id
        listed = (await c.get("/v1/webhooks", headers=mine)).json()["subscriptions"]
        assert [s["id"] for s in listed] == [sub["id"]] and "secret" not in listed[0]
        assert (await c.get("/v1/webhooks", headers=other)).json()["subscriptions"] == []

        r = await c.post(
            "/v1/memory/add", json={"type": "fact", "content": "Biscuit is a greyhound"},
            headers=mine,
        )  # fmt: skip
        item = r.json()["id"]
        await c.post(
            "/v1/memory/add", json={"type": "fact", "content": "not for this hook"}, headers=other
        )
        r = await c.post(f"/v1/memory/items/{item}/archive", headers=mine)
        assert r.status_code == 200, r.text
        got = await rx.wait_for(2)
        assert [g["type"] for g in got] == ["memory.learned", "memory.archived"]
        assert got[0]["data"]["content"] == "Biscuit is a greyhound"
        assert {g["user_id"] for g in got} == {user_id}
        for headers, body, _ in rx.received:
            assert verify(headers, body, sub["secret"])
            assert headers["x-engram-event-id"] == json.loads(body)["id"]
        await asyncio.sleep(0.3)
        assert len(rx.received) == 2  # nothing sent twice, the other user's event not at all
        metrics = (await c.get("/metrics")).text
        assert 'engram_webhook_deliveries_total{outcome="dead"} 0.0' in metrics
        assert 'engram_webhook_deliveries_total{outcome="delivered"} 2.0' in metrics


async def test_receiver_errors_slowness_and_an_outage_then_dead_list_and_replay(
    pool, make_settings, user_id
):
    settings = make_settings(QuerySettings, **FAST)
    async with receiver() as rx, running(create_app(settings, resolver=resolver_for(None))) as c:
        mine = await auth(pool, user_id)
        sub = await subscribe(c, mine, rx.url, events=["memory.learned"])
        # 500, then too slow to answer in time, then fine: delivered on the third attempt
        rx.script = ["fail", "slow", "ok"]
        await c.post("/v1/memory/add", json={"type": "fact", "content": "one"}, headers=mine)
        got = await rx.wait_for(1)
        assert got[0]["data"]["content"] == "one"
        assert rx.answered[0][1] == 500
        (d,) = await deliveries_when(c, mine, sub["id"], "delivered")
        assert d["attempts"] == 3
        # the receiver goes away: every attempt fails, the delivery is dead
        await rx.stop()
        await c.post("/v1/memory/add", json={"type": "fact", "content": "two"}, headers=mine)
        dead = await deliveries_when(c, mine, sub["id"], "dead")
        assert dead[0]["attempts"] == FAST["webhook_max_attempts"]
        assert dead[0]["last_error"] == "ConnectError"
        # back up: a replay delivers it
        await rx.start()
        r = await c.post(f"/v1/webhooks/{sub['id']}/replay", headers=mine)
        assert r.json() == {"replayed": 1}
        got = await rx.wait_for(3)  # "one" twice: the slow answer came after the retry
        assert [g["data"]["content"] for g in got].count("two") == 1
        # every 2xx was signed; a 500's body is not stored
        assert all(verify(h, b, sub["secret"]) for h, b, _ in rx.received)
        r = await c.get(f"/v1/webhooks/{sub['id']}/deliveries", headers=mine)
        assert "never stored" not in r.text
        assert 'outcome="dead"} 1.0' in (await c.get("/metrics")).text


async def test_an_event_committed_while_no_sender_runs_or_whose_sender_died_is_delivered(
    pool, make_settings, user_id
):
    settings = make_settings(QuerySettings, **FAST)
    async with receiver() as rx:
        async with running(create_app(settings, resolver=resolver_for(None))) as c:
            mine = await auth(pool, user_id)
            sub = await subscribe(c, mine, rx.url)
        # the service is down: changes commit with their events
        async with pool.acquire() as conn:
            await insert_items(conn, user_id, [NewItem(type="fact", content="a")], actor="t")
            await insert_items(conn, user_id, [NewItem(type="fact", content="b")], actor="t")
        # a sender claims one and dies before sending it (its lease is left behind)
        claimed = await pool.fetch(CLAIM, 1, 2.0)
        assert len(claimed) == 1
        started = time.monotonic()
        async with running(create_app(settings, resolver=resolver_for(None))):
            got = await rx.wait_for(2)
        assert sorted(g["data"]["content"] for g in got) == ["a", "b"]
        assert time.monotonic() - started >= 0.0
        assert all(verify(h, b, sub["secret"]) for h, b, _ in rx.received)


async def test_urls_the_server_must_not_call_are_refused_naming_the_field(
    pool, make_settings, user_id
):
    settings = make_settings(QuerySettings, warm_up=False)  # no private targets allowed
    async with running(create_app(settings, resolver=resolver_for(None))) as c:
        mine = await auth(pool, user_id)
        for url in [
            "http://169.254.169.254/latest/meta-data",
            "http://127.0.0.1:9/hook",
            "http://[::ffff:7f00:1]/hook",
            "http://[64:ff9b::a9fe:a9fe]/hook",
            "ftp://example.com/x",
        ]:
            r = await c.post("/v1/webhooks", json={"url": url}, headers=mine)
            assert r.status_code == 422, (url, r.text)
            assert r.json()["errors"][0]["field"] == "url"
        r = await c.post(
            "/v1/webhooks", json={"url": "https://example.com/h", "events": ["nope"]}, headers=mine
        )
        assert r.status_code == 422


async def test_erasure_sends_one_user_erased_to_admins_and_keeps_no_content(
    pool, make_settings, user_id
):
    settings = make_settings(QuerySettings, **FAST)
    async with receiver() as rx, running(create_app(settings, resolver=resolver_for(None))) as c:
        admin = await admin_auth(pool)
        mine = await auth(pool, user_id)
        everyone = await subscribe(c, admin, rx.url, events=["user.erased", "memory.deleted"])
        assert everyone["user_id"] is None
        await subscribe(c, mine, rx.url)
        await c.post("/v1/memory/add", json={"type": "fact", "content": "secret"}, headers=mine)
        await rx.wait_for(1)
        r = await c.delete(f"/v1/users/{user_id}", headers=mine)
        assert r.status_code == 200, r.text
        got = await rx.wait_for(2)
        assert [g["type"] for g in got] == ["memory.learned", "user.erased"]
        assert got[-1]["data"] == {"user_id": user_id}
        left = await pool.fetchval(
            "SELECT count(*) FROM webhook_events WHERE user_id = $1 AND type <> 'user.erased'",
            user_id,
        )
        assert left == 0
