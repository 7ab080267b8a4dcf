"""engram_client against a running query service: one test per endpoint group, sync and
async, errors mapped to exceptions; retries against a scripted local HTTP server."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from engram_client import (
    AsyncEngram,
    AuthenticationError,
    ConnectionFailed,
    Engram,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RetryPolicy,
    Unavailable,
    ValidationFailed,
    models,
)
from shared.apikeys import create_key
from tests.browser.seed import Seeded, seed_user
from tests.live import LiveQuery
from tests.support import ROOT


async def seeded_client(live: LiveQuery, pool: asyncpg.Pool) -> tuple[AsyncEngram, Seeded]:
    marker = f"Q{uuid.uuid4().hex[:6]}"
    seeded = await seed_user(pool, f"client-{marker.lower()}", marker)
    _, key = await create_key(pool, user_id=seeded.user_id)
    return AsyncEngram(live.url, key), seeded


async def test_memory(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    async with client:
        added = await client.memory.add(f"{s.marker} collects stamps", type="fact", theme="home")
        assert isinstance(added, models.MemoryAdded) and added.theme == "home"
        found = await client.memory.search("stamps")
        assert [h.id for h in found.results] == [added.id]
        assert found.results[0].content_snippet == f"{s.marker} collects stamps"
        item = await client.memory.get(added.id)
        assert item.status == "active" and item.type == "fact"
        assert "home" in {t.slug for t in (await client.memory.themes()).themes}
        await client.memory.archive(added.id)
        assert (await client.memory.get(added.id)).status == "archived"
        await client.memory.delete(added.id)
        with pytest.raises(NotFound):
            await client.memory.get(added.id)


async def test_remember_and_recall(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    async with client:
        stored = await client.remember(f"Sarah{s.marker} loves hiking", subjects=["my wife"])
        [memory] = stored.memories
        assert memory.content == f"Sarah{s.marker} loves hiking"
        assert [p["name"] for p in memory.subjects] == [f"Sarah{s.marker}"]
        recalled = await client.recall("hiking", about="my wife")
        assert recalled.results[0].content == f"Sarah{s.marker} loves hiking"
        assert recalled.about and recalled.about["resolved"] is True


async def test_facts(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, _ = await seeded_client(live_query, pool)
    async with client:
        await client.facts.save("work", "employer", "Acme Rockets", confidence=0.95)
        listed = await client.facts.list()
        # the list holds every live fact; the seeded memories of type fact have no key
        assert [(f.category, f.key, f.value) for f in listed.facts if f.key] == [
            ("work", "employer", "Acme Rockets")
        ]
        found = await client.facts.search("Acme")
        assert [f.value for f in found.facts] == ["Acme Rockets"]
        await client.facts.forget("employer", category="work")
        assert [f for f in (await client.facts.list()).facts if f.key] == []


async def test_context(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    async with client:
        summary = await client.context(policy="summary")
        assert isinstance(summary, models.Context)
        assert f"Project {s.marker} Atlas" in summary.text
        auto = await client.context(f"when does {s.marker} Atlas ship?", token_budget=500)
        assert auto.policy == "auto" and auto.tokens <= 500


async def test_episodes(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    async with client:
        found = await client.episodes.recall("garden")
        assert [e.episode_id for e in found.episodes] == [str(s.episode)]
        listed = await client.episodes.list(status="closed")
        assert [str(e["id"]) for e in listed.episodes] == [str(s.episode)]
        one = await client.episodes.get(str(s.episode))
        assert one.status == "closed"


async def test_messages(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    await pool.execute(
        "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, content, "
        "occurred_at) VALUES ($1, $2, $3, 'telegram', 'chat-1', 'user', $4, now())",
        uuid.uuid4(),
        s.user_id,
        s.episode,
        f"the {s.marker} tomatoes need staking",
    )
    async with client:
        found = await client.messages.search("tomatoes staking")
        assert [m.content_snippet for m in found.results] == [
            f"the {s.marker} tomatoes need staking"
        ]


async def test_people(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    async with client:
        people = await client.people.list()
        assert [p.name for p in people.people] == [f"Sarah{s.marker}"]
        made = await client.people.resolve("my brother Tom")
        assert made.created and made.person.name == "Tom"


async def test_tools(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    client, s = await seeded_client(live_query, pool)
    async with client:
        listed = await client.tools.list("openai")
        names = [t["function"]["name"] for t in listed.openai]
        assert names[:2] == ["memory", "memory_facts"] and "context" in names
        out = await client.tools.call("memory", {"operation": "search", "query": "Bergen"})
        assert not out.is_error
        assert [r["content_snippet"] for r in out.result["results"]] == [
            f"{s.marker} lives in Bergen"
        ]
        bad = await client.tools.call("memory", {"operation": "fly"})
        assert bad.is_error and "unknown operation" in (bad.error or "")


async def test_sync_client_and_errors(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    alice = f"client-sync-{uuid.uuid4().hex[:6]}"
    _, alice_key = await create_key(pool, user_id=alice)
    _, bob_key = await create_key(pool, user_id=f"{alice}-b")
    await asyncio.to_thread(sync_calls, live_query.url, alice, alice_key, bob_key)


def sync_calls(url: str, alice: str, alice_key: str, bob_key: str) -> None:
    with Engram(url, alice_key) as alice_client:
        assert alice_client.me().user_id == alice
        added = alice_client.memory.add("Alice's PIN is 4455", type="fact")
        with pytest.raises(ValidationFailed) as bad:
            alice_client.memory.add("", type="fact")
        assert "content" in bad.value.detail
    with Engram(url, bob_key) as bob:
        with pytest.raises(NotFound):
            bob.memory.get(added.id)
        assert bob.memory.search("PIN").results == []
    with Engram(url, bob_key, user=alice) as bob_as_alice:
        with pytest.raises(PermissionDenied):
            bob_as_alice.memory.search("PIN")
    with Engram(url, "eng_not_a_key") as nobody:
        with pytest.raises(AuthenticationError) as denied:
            nobody.me()
        assert denied.value.status == 401


class Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, body) of ``script``."""

    script: list[tuple[int, dict[str, object]]] = []
    seen: list[float] = []

    def do_GET(self) -> None:
        Scripted.seen.append(time.monotonic())
        status, body = Scripted.script.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "0.2")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


ME = {"user_id": "u1", "admin": False, "key_prefix": "eng_abc"}
BUSY = {"error": "unavailable", "detail": "database is restarting"}


def test_retries_429_and_503_then_succeeds(scripted: str) -> None:
    Scripted.script = [(503, BUSY), (429, {"detail": "slow down"}), (200, ME)]
    Scripted.seen = []
    with Engram(scripted, "k", retry=RetryPolicy(attempts=3, backoff_s=0.05)) as client:
        assert client.me().user_id == "u1"
    assert len(Scripted.seen) == 3
    assert Scripted.seen[2] - Scripted.seen[1] >= 0.19  # Retry-After honoured


async def test_gives_up_after_the_last_attempt(scripted: str) -> None:
    Scripted.script = [(503, BUSY), (503, BUSY)]
    Scripted.seen = []
    async with AsyncEngram(scripted, "k", retry=RetryPolicy(attempts=2, backoff_s=0.01)) as c:
        with pytest.raises(Unavailable) as exc:
            await c.me()
    assert exc.value.detail == "database is restarting" and len(Scripted.seen) == 2


def test_installs_and_imports_on_its_own(tmp_path: Path) -> None:
    """The package needs only httpx and pydantic: its wheel says so, and importing it
    loads nothing of the service (no torch, no database driver)."""
    src = shutil.copytree(ROOT / "engram_client", tmp_path / "src", ignore=_no_cache)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    [wheel] = (tmp_path / "dist").glob("engram_client-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith("METADATA"))
        requires = [
            line.split(":", 1)[1].strip()
            for line in zf.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
        assert all(n.startswith("engram_client") for n in zf.namelist())
        zf.extractall(tmp_path / "site")
    assert sorted(r.split(">")[0] for r in requires) == ["httpx", "pydantic"]
    probe = (
        "import sys, engram_client; "
        "heavy = {'torch', 'shared', 'services', 'numpy', 'asyncpg', 'mcp'}; "
        "print(engram_client.__file__, sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == f"{tmp_path / 'site' / 'engram_client' / '__init__.py'} []"


def _no_cache(folder: str, names: list[str]) -> set[str]:
    return {n for n in names if n in {"__pycache__", "build"} or n.endswith(".egg-info")}


async def test_a_body_over_the_services_limit_raises_payload_too_large(
    live_query: LiveQuery, pool: asyncpg.Pool
) -> None:
    client, _ = await seeded_client(live_query, pool)
    async with client:
        with pytest.raises(PayloadTooLarge) as exc:
            await client.memory.add("z" * 2_000_000, type="fact")
        assert "1000000 bytes" in exc.value.detail
        with pytest.raises(ValidationFailed) as bad:
            await client.memory.add("z" * 30_000, type="fact")
        assert bad.value.detail == "content: String should have at most 20000 characters"


async def test_the_readme_example_runs(live_query: LiveQuery, pool: asyncpg.Pool) -> None:
    readme = (ROOT / "README.md").read_text()  # noqa: ASYNC240 - one small file
    section = readme[readme.index("### From Python") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("\n```", start)]
    user = f"readme-{uuid.uuid4().hex[:6]}"
    _, key = await create_key(pool, user_id=user)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        env={"PYTHONPATH": str(ROOT), "ENGRAM_URL": live_query.url, "ENGRAM_API_KEY": key},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "['Likes window seats']"
    assert lines[1] == "My favourite colour is blue"
    # the saved home city is in the sections context for "where do I live?" (issue 29.15)
    assert "- location / home city: Bergen" in lines, lines
    assert lines[-1].startswith("no such memory:")


class _Echo(BaseHTTPRequestHandler):
    """Reads a request's body and answers an empty checkpoint query."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the query service speaks it
    bodies: list[int] = []

    def do_POST(self) -> None:
        _Echo.bodies.append(len(self.rfile.read(int(self.headers["Content-Length"]))))
        data = b'{"checkpoints": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


async def test_a_request_head_and_body_leave_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpcore writes a request's head and body apart; the sync client holds them until
    the answer is read, and the async one writes its request at once (engram_client/
    _wire.py), so the server is woken once per call."""
    from httpcore._backends.sync import SyncStream

    writes: list[int] = []
    real = SyncStream.write

    def counted(self: object, buffer: bytes, timeout: float | None = None):  # type: ignore[no-untyped-def]
        writes.append(len(buffer))
        return real(self, buffer, timeout)

    real_async = asyncio.StreamWriter.write

    def counted_async(self: asyncio.StreamWriter, data: bytes) -> None:  # type: ignore[override]
        writes.append(len(data))
        real_async(self, data)

    monkeypatch.setattr(SyncStream, "write", counted)
    monkeypatch.setattr(asyncio.StreamWriter, "write", counted_async)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _Echo.bodies = []
    try:
        contains = {"format": "x" * 5000}
        with Engram(url, "k") as client:
            for _ in range(2):
                assert client.checkpoints.query(thread_id="t", contains=contains).checkpoints == []
        async with AsyncEngram(url, "k") as aclient:
            for _ in range(2):
                found = await aclient.checkpoints.query(thread_id="t", contains=contains)
                assert found.checkpoints == []
    finally:
        server.shutdown()
        server.server_close()
    assert len(writes) == 4 and min(writes) > _Echo.bodies[0] > 5000, (writes, _Echo.bodies)


class _Heads(BaseHTTPRequestHandler):
    """Keeps each request's method, path, headers and body; answers what both calls read."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    def _answer(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        _Heads.seen.append((self.command, self.path, dict(self.headers), self.rfile.read(size)))
        data = b'{"stored": 1, "facts": [], "total": 0}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


async def test_requests_carry_what_httpx_would_send() -> None:
    """The clients hand a call to their own connection pool without httpx's client
    layer; what reaches the server is what httpx.Client sent: the method, the quoted
    path, the key, the JSON body, its length and type (a query string: through httpx)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Heads)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    _Heads.seen = []
    writes = [{"idx": 0, "channel": "c", "value": "é ☃"}]
    try:
        with Engram(url, "k1", user="u1") as client:
            client.checkpoints.put_writes("t/1", "c 1", "task", writes)
        async with AsyncEngram(url, "k2") as aclient:
            await aclient.checkpoints.put_writes("t/1", "c 1", "task", writes)
            await aclient.facts.list(category="x")
    finally:
        server.shutdown()
        server.server_close()
    (m1, p1, h1, b1), (m2, p2, h2, b2), (m3, p3, h3, _) = _Heads.seen
    assert m1 == m2 == "PUT" and p1 == p2 == "/v1/threads/t%2F1/checkpoints/c%201/writes"
    assert h1["Authorization"] == "Bearer k1" and h1["X-Engram-User"] == "u1"
    assert h2["Authorization"] == "Bearer k2" and "X-Engram-User" not in h2
    for h, b in ((h1, b1), (h2, b2)):
        assert h["Content-Type"] == "application/json" and h["Content-Length"] == str(len(b))
        assert h["Host"] == url[7:-1] and h["User-Agent"] == "engram-client/0.1"
        assert json.loads(b)["writes"] == writes and "é ☃".encode() in b  # as httpx: UTF-8
    assert m3 == "GET" and p3 == "/v1/facts?category=x" and h3["Authorization"] == "Bearer k2"


async def test_a_refused_connection_is_retried_then_raised() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = RetryPolicy(attempts=2, backoff_s=0.01)
    with Engram(f"http://127.0.0.1:{port}", "k", retry=policy) as client:
        with pytest.raises(ConnectionFailed, match="ConnectError"):
            client.me()
    async with AsyncEngram(f"http://127.0.0.1:{port}", "k", retry=policy) as aclient:
        with pytest.raises(ConnectionFailed, match="ConnectError"):
            await aclient.checkpoints.query(thread_id="t")


class _Ways(BaseHTTPRequestHandler):
    """Answers each request a way of ``script`` (chunked, closing, slow) with ``ME``."""

    protocol_version = "HTTP/1.1"
    script: list[str] = []
    seen: list[str] = []

    def do_GET(self) -> None:
        way = _Ways.script.pop(0) if _Ways.script else "plain"
        _Ways.seen.append(way)
        data = json.dumps(ME).encode()
        if way == "slow":
            time.sleep(0.5)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if way == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (data[:7], data[7:]):
                self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\nX-Trailer: 1\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(data)))
            if way == "close":
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        if way == "drop":  # closes the kept connection without saying so (idle timeout)
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the client hung up on the slow answer: expected


async def test_the_async_clients_own_connections() -> None:
    """engram_client/_wire.py: an answer chunked or sized, a connection kept or closed by
    the server (said or not), each request sent once; a slow answer times out."""
    server = _Quiet(("127.0.0.1", 0), _Ways)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _Ways.script = ["chunked", "plain", "close", "plain", "drop", "plain", "plain"]
    _Ways.seen = []
    try:
        async with AsyncEngram(url, "k") as client:
            assert client._wire is not None
            for _ in range(4):
                assert (await client.me()).user_id == "u1"
            await asyncio.sleep(0.05)
            for _ in range(3):
                assert (await client.me()).user_id == "u1"
                await asyncio.sleep(0.05)  # the dropped connection's end is seen
        assert _Ways.seen == ["chunked", "plain", "close", "plain", "drop", "plain", "plain"]
        _Ways.script = ["slow"]
        policy = RetryPolicy(attempts=1)
        async with AsyncEngram(url, "k", timeout=0.2, retry=policy) as client:
            with pytest.raises(ConnectionFailed, match="ReadTimeout"):
                await client.me()
    finally:
        server.shutdown()
        server.server_close()


class _Slow(BaseHTTPRequestHandler):
    """Answers ``ME`` after 10 ms."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        time.sleep(0.01)
        data = json.dumps(ME).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class _Busy(_Quiet):
    request_queue_size = 256  # the listen backlog: 100 connections at once


async def test_calls_at_once_share_at_most_100_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As httpx's pool: at most 100 connections open at once; more calls wait."""
    from engram_client import _wire

    count = {"open": 0, "most": 0}
    real_init, real_close = _wire._Connection.__init__, _wire._Connection.close

    def opened(self: _wire._Connection, *args: Any) -> None:
        real_init(self, *args)
        count["open"] += 1
        count["most"] = max(count["most"], count["open"])

    def closed(self: _wire._Connection) -> None:
        if not self.writer.is_closing():
            count["open"] -= 1
        real_close(self)

    monkeypatch.setattr(_wire._Connection, "__init__", opened)
    monkeypatch.setattr(_wire._Connection, "close", closed)
    server = _Busy(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        async with AsyncEngram(f"http://127.0.0.1:{server.server_address[1]}", "k") as client:
            answers = await asyncio.gather(*(client.me() for _ in range(250)))
        assert {a.user_id for a in answers} == {"u1"}
        assert count["most"] == 100
    finally:
        server.shutdown()
        server.server_close()
