"""Query reads on a real streaming replica (``replicated``: a primary and a replica from
``pg_basebackup -R``), read-your-writes across two query instances:

- add-then-search pairs, the add through one instance and the search through the
  other (the write's position is shared in Redis): 0 misses, and the reads served by
  the replica;
- with the replica's replay paused: a read after the user's own write (through a route
  or a tool call) waits the bound and reads the primary (it sees the write, the replica
  does not have it); a read by a user with no prior write reads the replica (it does
  not see a row the primary has);
- the replica stopped under reads: every read answers 200 (the primary), and reads go
  back to the replica once it is up again;
- the replica and then the primary restarted under add-then-search load: the errors
  counted (writes refused 503 while the primary is down), no acknowledged add lost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic import SecretStr

from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.db import create_pool
from tests.cluster.conftest import Replicated
from tests.query.helpers import FixedEmbedder, auth, resolver_for
from tests.support import running

PAIRS = 400  # bench/replica.py runs 10,000 (docs/scale.md)
USERS = 10


@asynccontextmanager
async def _instances(
    make_settings: Callable[..., Any], replicated: Replicated, n: int = 2, **overrides: Any
) -> AsyncIterator[list[tuple[httpx.AsyncClient, Any]]]:
    """``n`` query instances on the primary, reading the replica (one shared Redis)."""
    settings = make_settings(
        QuerySettings,
        database_url=SecretStr(replicated.database_url),
        database_read_url=SecretStr(replicated.read_url),
        warm_up=False,
        **overrides,
    )
    async with AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            app = create_app(settings, resolver=resolver_for(FixedEmbedder({})))
            out.append((await stack.enter_async_context(running(app)), app))
        yield out


def _reads(app: Any) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for metric in app.state.reads.reads.collect():
        for s in metric.samples:
            if s.name.endswith("_total"):
                counts[(s.labels["db"], s.labels["why"])] += int(s.value)
    return counts


async def _add(client: httpx.AsyncClient, h: dict[str, str], content: str) -> httpx.Response:
    return await client.post("/v1/memory/add", headers=h, json={"type": "fact", "content": content})


async def _found(client: httpx.AsyncClient, h: dict[str, str], token: str) -> bool | None:
    """Does a search for ``token`` find it (None: the search did not answer 200)?"""
    r = await client.post("/v1/memory/search", headers=h, json={"query": token, "limit": 50})
    if r.status_code != 200:
        return None
    return any(token in hit["content_snippet"] for hit in r.json()["results"])


@pytest.fixture
async def primary(replicated: Replicated) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(replicated.database_url, max_size=4)
    yield pool
    await pool.close()


async def test_add_then_search_through_the_replica_misses_nothing(
    make_settings: Callable[..., Any], replicated: Replicated, primary: asyncpg.Pool
) -> None:
    users = [f"ryw-{uuid.uuid4().hex[:8]}-{i}" for i in range(USERS)]
    keys = {u: await auth(primary, u) for u in users}
    misses: list[str] = []
    async with _instances(make_settings, replicated) as [(a, _), (b, app_b)]:

        async def pairs(user: str) -> None:
            for i in range(PAIRS // USERS):
                token = f"zq{uuid.uuid4().hex[:12]}"
                added = await _add(a, keys[user], f"pair {i} remembers {token}")
                assert added.status_code == 200, added.text
                if not await _found(b, keys[user], token):  # the other instance reads
                    misses.append(token)

        await asyncio.gather(*(pairs(u) for u in users))
        reads = _reads(app_b)
    assert misses == []
    served = sum(n for (db, _), n in reads.items() if db == "replica")
    print(f"\nread-your-writes: {PAIRS} pairs, 0 misses; reads {dict(reads)}")
    assert sum(reads.values()) == PAIRS
    # the replica path is what is tested: most reads are the replica's (a loaded machine
    # may leave some past the 250 ms bound, which read the primary)
    assert served >= PAIRS // 2, reads


async def test_paused_replay_reads_the_primary_after_a_write_and_the_replica_without(
    make_settings: Callable[..., Any], replicated: Replicated, primary: asyncpg.Pool
) -> None:
    writer, reader = (f"ryw-{uuid.uuid4().hex[:8]}-{r}" for r in ("w", "r"))
    h_writer, h_reader = await auth(primary, writer), await auth(primary, reader)
    replica = await asyncpg.connect(replicated.read_url)
    try:
        async with _instances(make_settings, replicated, n=1, read_your_writes_wait_ms=100) as [
            (client, app)
        ]:
            await replica.execute("SELECT pg_wal_replay_pause()")
            try:
                token = f"zq{uuid.uuid4().hex[:12]}"
                assert (await _add(client, h_writer, f"written while paused {token}")).is_success
                started = time.perf_counter()
                assert await _found(client, h_writer, token) is True
                assert time.perf_counter() - started >= 0.1  # it waited the bound first
                sql = "SELECT count(*) FROM memory_items WHERE content LIKE $1"
                assert await replica.fetchval(sql, f"%{token}") == 0  # the replica lacks it
                assert _reads(app)[("primary", "behind")] == 1
                # a write by a tool call (/v1/tools/call, MCP) is waited for as well
                tooled = f"zq{uuid.uuid4().hex[:12]}"
                call = {"operation": "add", "type": "fact", "content": f"by a tool {tooled}"}
                r = await client.post(
                    "/v1/tools/call", headers=h_writer, json={"name": "memory", "input": call}
                )
                assert r.status_code == 200 and r.json()["is_error"] is False, r.text
                assert await _found(client, h_writer, tooled) is True
                assert _reads(app)[("primary", "behind")] == 2
                # a user with no write through the API reads the replica: a row the
                # primary has (written behind the API's back) is not seen there
                other = f"zq{uuid.uuid4().hex[:12]}"
                await primary.execute(
                    "INSERT INTO memory_items (user_id, type, content) VALUES ($1, 'fact', $2)",
                    reader,
                    f"not replayed {other}",
                )
                assert await _found(client, h_reader, other) is False
                assert _reads(app)[("replica", "no_write")] == 1
            finally:
                await replica.execute("SELECT pg_wal_replay_resume()")
            deadline = time.monotonic() + 10
            while not await _found(client, h_reader, other):
                assert time.monotonic() < deadline, "the replica did not replay the row"
                await asyncio.sleep(0.05)
    finally:
        await replica.close()


async def test_reads_fall_back_to_the_primary_while_the_replica_is_stopped(
    make_settings: Callable[..., Any], replicated: Replicated, primary: asyncpg.Pool
) -> None:
    user = f"ryw-{uuid.uuid4().hex[:8]}"
    h = await auth(primary, user)
    statuses: Counter[int] = Counter()
    async with _instances(make_settings, replicated, n=1) as [(client, app)]:
        token = f"zq{uuid.uuid4().hex[:12]}"
        assert (await _add(client, h, f"before the stop {token}")).is_success
        stop = asyncio.Event()

        async def reader() -> None:
            while not stop.is_set():
                r = await client.post("/v1/memory/search", headers=h, json={"query": token})
                statuses[r.status_code] += 1
                assert r.status_code != 200 or r.json()["results"], "the add was not found"

        readers = [asyncio.create_task(reader()) for _ in range(4)]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(replicated.replica.stop)
        try:
            await asyncio.sleep(1.5)  # reads while it is down
        finally:
            await asyncio.to_thread(replicated.replica.start)
        await asyncio.sleep(1.5)  # past DOWN_S: back on the replica
        before = _reads(app)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*readers)
        after = _reads(app)
    print(f"\nreplica stopped under reads: statuses {dict(statuses)}; reads {dict(after)}")
    assert set(statuses) == {200}, statuses
    assert after[("primary", "replica_down")] + after[("primary", "retried")] > 0
    back = sum(n - before[k] for k, n in after.items() if k[0] == "replica")
    assert back > 0, "reads did not return to the replica"


async def test_replica_and_primary_restarts_under_load_lose_no_acknowledged_add(
    make_settings: Callable[..., Any], replicated: Replicated, primary: asyncpg.Pool
) -> None:
    users = [f"ryw-{uuid.uuid4().hex[:8]}-{i}" for i in range(4)]
    keys = {u: await auth(primary, u) for u in users}
    acked: dict[str, list[str]] = {u: [] for u in users}
    outcomes: Counter[str] = Counter()
    stop = asyncio.Event()
    async with _instances(make_settings, replicated) as [(a, _), (b, _)]:

        async def load(user: str) -> None:
            while not stop.is_set():
                token = f"zq{uuid.uuid4().hex[:12]}"
                try:
                    r = await _add(a, keys[user], f"under restarts {token}")
                except Exception as exc:  # noqa: BLE001 - the in-process app raised: a 500
                    outcomes[f"add {type(exc).__name__}"] += 1
                    await asyncio.sleep(0.05)
                    continue
                if r.status_code != 200:
                    outcomes[f"add {r.status_code}"] += 1
                    await asyncio.sleep(0.05)
                    continue
                acked[user].append(token)
                try:
                    found = await _found(b, keys[user], token)
                except Exception as exc:  # noqa: BLE001 - as above
                    outcomes[f"read {type(exc).__name__}"] += 1
                    continue
                outcomes[{True: "read ok", False: "read MISS", None: "read error"}[found]] += 1

        tasks = [asyncio.create_task(load(u)) for u in users]
        await asyncio.sleep(0.5)
        await asyncio.to_thread(replicated.replica.stop)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(replicated.replica.start)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(replicated.primary.restart)
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.gather(*tasks)
        # every acknowledged add is on the primary and, once replayed, on the replica
        for user in users:
            stored = {
                r["content"].rsplit(" ", 1)[-1]
                for r in await primary.fetch(
                    "SELECT content FROM memory_items WHERE user_id = $1", user
                )
            }
            assert set(acked[user]) <= stored
        deadline = time.monotonic() + 30
        for user in users:
            last = acked[user][-1]
            while not await _found(b, keys[user], last):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
    total = sum(len(v) for v in acked.values())
    print(f"\nrestarts under load: {total} adds acknowledged, 0 lost; outcomes {dict(outcomes)}")
    assert outcomes["read MISS"] == 0, outcomes
    assert total > 0 and outcomes["read ok"] > 0
    # a restart answers 503 (send it again), never a 500: the app raised nothing
    answered = ("ok", "MISS", "error")
    raised = {
        k: n for k, n in outcomes.items() if k.split()[1] not in answered and not k[-1].isdigit()
    }
    assert not raised, outcomes
