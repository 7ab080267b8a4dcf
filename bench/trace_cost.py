"""bench/trace_cost: what tracing switched off costs, counted in instructions.

    python -m bench.trace_cost --old /path/to/checkout/before/tracing \
        [--without /path/to/this/code/without/tracing/hooks] [--repeats 2]
    python -m bench.trace_cost --old /checkout/before --new /checkout/after \
        [--also NAME=/another/checkout] [--name results_file]   # any two checkouts

Wall-clock rounds on a shared machine vary by tens of percent, far more than the 2%
the target is about (issue 33: tracing off costs < 2% of ingest throughput). This
bench counts the instructions the hot paths execute instead, with valgrind's
callgrind, which does not depend on the machine's load: the same fixed workload,
run in ONE Python process under ``valgrind --tool=callgrind``, once as this
checkout's code (tracing off, the default: no endpoint) and once as ``--old``'s
(code from before tracing existed), each a child process with its own checkout
first on the path, against real PostgreSQL and Redis (embedded, started here).

The workload, the same text for both checkouts (it uses only what both have):

- ``ingest``: N turns (200 users x 5 chats, bench/ingest's turns) already in the
  ``turns`` stream are read with XREADGROUP in batches and handed to the ingest
  service's own ``StreamConsumer.process`` (parse, the use case ``store_turns``:
  users, episodes, messages in one transaction, the ``embed`` request published,
  XACK), as its reader does; per op = per turn;
- ``embed``: the ``embed`` requests ingest published, read and handed to the embedder
  service's consumer (rows fetched, vectors asked of an Ollama-shaped HTTP server
  in the parent process, written); per op = per turn embedded;
- ``search``, ``context``, ``turn``: requests to the query service's ASGI app in
  process (httpx's ASGI transport, an API key's bearer): ``POST /v1/messages/search``
  (fused), ``POST /v1/context`` (auto), ``POST /v1/turns`` (published to the stream);
  per op = per request. That user (``u0``) has one turn in 200 (3 at the default
  size: the warm-up's 100 and 400), all of role ``user``, each in its own chat;
- ``search_assistant``, ``context_assistant``: the same two requests for another user
  whose one chat is assistant-shaped (40 turns, the user's of 8 words, the
  assistant's of 60, 50 of them from a wider vocabulary), stored and embedded (not
  counted) after the ``embed`` phase; where a checkout ranks a chat with an
  assistant by its own rules (``services.query.ranking.fusion.assistant_chat``),
  ``checks`` says which rules each user's search took (``assistant_gate``).

Each phase runs a warm-up first (a batch, a few requests: first-call imports, caches,
prepared statements), then callgrind's instrumentation is switched on and its
counters zeroed, the measured part runs, and the counters are dumped with the
phase's name and instrumentation switched off again (callgrind client requests, from
a tiny C helper this bench compiles with ``cc`` against valgrind's headers; start-up
runs uninstrumented, ``--instr-atstart=no``).
The services' runtimes are started without their broker and background loops
(sweeps, periodic jobs: timers that would fire a wall-time-dependent number of
times), and a batch is handed to ``process`` with no owner (no keep-claimed task);
``PYTHONHASHSEED`` is fixed. What is counted: instructions of this Python process
(user space, its libraries); PostgreSQL, Redis and the embedding server run in
other processes and are not counted, nor is kernel time.

``--new`` / ``--also NAME=PATH``: compare any checkouts, not only this one: ``--new``
replaces this checkout (then named ``new``); each ``--also`` way is compared with
``--old`` too; ``--name`` names the results file.

``--without``: a third way, a control: this code with tracing's hooks taken out of
its hot paths (e.g. a detached worktree of HEAD with them edited out). ``--old`` is
older code, so it differs in more than tracing; ``off`` against ``without`` is
tracing's part alone.

Prints instructions per op for each way and the ratio off/old (and off/without) per
phase, with callgrind's totals; writes ``bench/results/trace_cost.json``; ``--keep DIR`` keeps
the callgrind files (``callgrind_annotate`` them to see where a difference is).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg

from bench.common import bench_postgres, table, write_result
from engram_cli.embedded import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
PHASES = (
    "ingest",
    "embed",
    "search",
    "context",
    "turn",
    "search_assistant",
    "context_assistant",
)
DIMS = 384

HELPER_C = r"""
#include <valgrind/callgrind.h>
#include <valgrind/valgrind.h>
void engram_cg_zero(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void engram_cg_dump(const char *label) {
    CALLGRIND_DUMP_STATS_AT(label);
    CALLGRIND_STOP_INSTRUMENTATION;
}
int engram_cg_running(void) { return RUNNING_ON_VALGRIND; }
"""

# The workload: run with a checkout's code first on the path. argv: turns, batch,
# queries, the ingest users' run id. Everything it touches exists in both checkouts.
WORKLOAD = r"""
import asyncio, ctypes, json, os, sys
from datetime import UTC, datetime, timedelta

class NoCallgrind:  # native (no valgrind): nothing to zero or dump
    def engram_cg_zero(self): pass
    def engram_cg_dump(self, label): pass

helper = os.environ.get("ENGRAM_CG_HELPER")
CG = ctypes.CDLL(helper) if helper else NoCallgrind()

from services.embedder.app import create_app as embedder_app
from services.ingest.app import create_app as ingest_app
from services.query.app import create_app as query_app
from shared.apikeys import create_key
from shared.db import create_pool
from shared.events import TurnReceived, encode
from shared.redis_client import connect_redis
from shared.streams import EVENT_FIELD
import httpx

N, BATCH, QUERIES, RUN = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
WORDS = ("remember the meeting with sarah about the garden project next tuesday and "
         "bring the blue notebook coffee weather travel plans dinner italian").split()
USERS, CHATS = 200, 5
# an assistant-shaped chat (search_assistant, context_assistant): short user turns,
# long assistant answers over a wider vocabulary (more distinct lexemes)
VOCAB = ("garden tomato basil soil compost water sunlight seedling fence shovel "
         "recipe pasta sauce garlic onion olive oven simmer butter pepper "
         "flight hotel passport luggage airport train ticket museum beach hiking "
         "budget invoice salary savings mortgage insurance pension receipt tax loan "
         "doctor appointment vitamin exercise sleep stretch running yoga dentist knee "
         "meeting deadline report slides manager client contract schedule email review").split()
ASSIST_TURNS = 40


def assistant_chat_turns():
    t0 = datetime(2026, 2, 1, tzinfo=UTC)
    out = []
    for i in range(ASSIST_TURNS):
        if i % 2 == 0:  # the user: 8 words, every other one a question
            words = [WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(6)]
            words += [VOCAB[(i * 7 + k) % len(VOCAB)] for k in range(2)]
            content = " ".join(words) + ("?" if i % 4 == 0 else ".")
        else:  # the assistant: 60 words, most of them distinct
            words = [VOCAB[(i * 11 + k * 7) % len(VOCAB)] for k in range(50)]
            words += [WORDS[(i + k * 5) % len(WORDS)] for k in range(10)]
            content = " ".join(words) + "."
        out.append(TurnReceived(
            user_id=f"{RUN}-a", display_name="User A", provider="bench", chat_id="a1",
            role="user" if i % 2 == 0 else "assistant", content=content,
            occurred_at=t0 + timedelta(seconds=60 * i)))
    return out


def turns(n, first):
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(first, first + n):
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)]
        out.append(TurnReceived(
            user_id=f"{RUN}-u{i % USERS}", display_name=f"User {i % USERS}", provider="bench",
            chat_id=f"c{(i // USERS) % CHATS}", role="user" if i % 2 == 0 else "assistant",
            content=" ".join(words) + f" #{i}", occurred_at=t0 + timedelta(seconds=i)))
    return out


async def start(app):
    # the runtime's pool, Redis and start hooks; no broker, no background loops
    rt = app.state.runtime
    s = rt.settings
    rt._pool = await create_pool(s.require_database_url(), min_size=s.db_pool_min,
                                 max_size=s.db_pool_max)
    rt._redis = connect_redis(s)
    for hook in rt.on_start:
        await hook(rt)
    for c in rt.consumers:
        await c.ensure_group()
    return rt


def consumer_of(rt, stream):
    [c] = [c for c in rt.consumers if c.stream_name == stream]
    return c


async def consume(rt, c, batch, upto):
    # read and hand to the service's consumer as its reader does; upto entries
    done = 0
    while done < upto:
        reply = await rt.redis.xreadgroup(c.group, c.consumer, {c.stream: ">"},
                                          count=min(batch, upto - done))
        if not reply:
            raise RuntimeError(f"{c.stream}: {done} of {upto} read")
        entries = [(i.decode(), f) for i, f in reply[0][1]]
        await c.process(entries, attempts=None, owner=None)
        done += len(entries)
    return done


def measured(label):
    class Phase:
        def __enter__(self):
            CG.engram_cg_zero()
        def __exit__(self, *exc):
            CG.engram_cg_dump(label.encode())
    return Phase()


async def main():
    out = {}
    ingest = await start(ingest_app())
    embedder = await start(embedder_app())
    query_application = query_app()
    query = await start(query_application)
    pool = ingest.pool

    # ingest: warm-up batch, then N turns
    tc = consumer_of(ingest, "turns")
    warm, rest = turns(BATCH, 0), turns(N, BATCH)
    for t in warm + rest:
        await ingest.redis.xadd(tc.stream, {EVENT_FIELD: encode(t)})
    await consume(ingest, tc, BATCH, BATCH)
    await ingest.publisher.flush()
    with measured("ingest"):
        await consume(ingest, tc, BATCH, N)
    out["stored"] = await pool.fetchval(
        "SELECT count(*) FROM messages WHERE user_id LIKE $1", RUN + "-%")

    # embed: the warm-up batch's request, then the rest
    ec = consumer_of(embedder, "embed")
    requests = await embedder.redis.xlen(ec.stream)
    await consume(embedder, ec, 1, 1)
    with measured("embed"):
        await consume(embedder, ec, embedder.settings.embed_read_batch, requests - 1)
    out["embed_requests"] = requests
    out["embedded"] = await pool.fetchval(
        "SELECT count(*) FROM messages WHERE user_id LIKE $1 AND embedding_state = 'ready'",
        RUN + "-%")

    # the assistant-shaped chat: stored and embedded (not counted)
    before = await embedder.redis.xlen(ec.stream)
    for t in assistant_chat_turns():
        await ingest.redis.xadd(tc.stream, {EVENT_FIELD: encode(t)})
    await consume(ingest, tc, BATCH, ASSIST_TURNS)
    await ingest.publisher.flush()
    await consume(embedder, ec, embedder.settings.embed_read_batch,
                  await embedder.redis.xlen(ec.stream) - before)
    out["assistant_chat"] = [await pool.fetchval(
        "SELECT count(*) FROM messages WHERE user_id = $1" + extra, RUN + "-a")
        for extra in ("", " AND embedding_state = 'ready'")]

    # query: a user with N / USERS turns (search, context, turn), and the user of the
    # assistant-shaped chat (search_assistant, context_assistant)
    headers = {}
    for who in ("u0", "a"):
        _, secret = await create_key(pool, user_id=f"{RUN}-{who}")
        headers[who] = {"Authorization": f"Bearer {secret}"}
    h, ha = headers["u0"], headers["a"]
    transport = httpx.ASGITransport(app=query_application)
    status = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        async def search(i, h=h):
            return await client.post("/v1/messages/search", headers=h, json={
                "query": f"{WORDS[i % len(WORDS)]} {WORDS[(i * 5) % len(WORDS)]}", "limit": 10})
        async def context(i, h=h):
            return await client.post("/v1/context", headers=h, json={
                "message": f"what about the {WORDS[(i * 3) % len(WORDS)]}?"})
        async def turn(i):
            return await client.post("/v1/turns", headers=h, json={
                "chat_id": "q", "role": "user", "content": f"query turn {i} " + " ".join(WORDS)})
        async def search_assistant(i):
            return await client.post("/v1/messages/search", headers=ha, json={
                "query": f"{VOCAB[(i * 7) % len(VOCAB)]} {WORDS[(i * 5) % len(WORDS)]}",
                "limit": 10})
        async def context_assistant(i):
            return await client.post("/v1/context", headers=ha, json={
                "message": f"what did you say about the {VOCAB[(i * 3) % len(VOCAB)]}?"})
        for name, call in (("search", search), ("context", context), ("turn", turn),
                           ("search_assistant", search_assistant),
                           ("context_assistant", context_assistant)):
            codes = [(await call(i)).status_code for i in range(3)]
            with measured(name):
                for i in range(3, 3 + QUERIES):
                    codes.append((await call(i)).status_code)
            status[name] = sorted(set(codes))
        # which rules each user's search took, where the checkout has the gate
        # (services.query.ranking.fusion.assistant_chat; after the counted phases)
        try:
            from services.query.ranking import fusion
        except ImportError:
            fusion = None
        gate = getattr(fusion, "assistant_chat", None)
        if gate is not None:
            seen = []
            fusion.assistant_chat = lambda cands: seen.append(gate(cands)) or seen[-1]
            out["assistant_gate"] = {}
            for who, call in (("u0", search), ("a", search_assistant)):
                seen.clear()
                await call(0)
                out["assistant_gate"][who] = sorted(set(seen))
            fusion.assistant_chat = gate
    out["status"] = status
    await query.publisher.flush()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # counters dumped; the servers are the parent's to stop


asyncio.run(main())
"""


class EmbeddingServer:
    """An Ollama-shaped embeddings endpoint on loopback (``POST /api/embed``): a fixed
    unit vector per text, from a hash of it. Runs in the parent: not counted."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = json.dumps(
                    {"model": body["model"], "embeddings": [_vector(t) for t in texts]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _vector(text: str) -> list[float]:
    seed = hashlib.sha256(text.encode()).digest()
    raw = [((seed[i % 32] + i * 37) % 251) / 251.0 - 0.5 for i in range(DIMS)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


def build_helper(into: Path) -> Path:
    """The callgrind client requests as a shared library (``cc``, valgrind's headers)."""
    src = into / "cg_helper.c"
    src.write_text(HELPER_C)
    lib = into / "cg_helper.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def migrate(code: Path, url: str) -> None:
    """``url``'s database migrated by ``code``'s own migrations (not under valgrind)."""
    script = (
        "import asyncio, sys; from shared.migrate import apply; "
        "asyncio.run(apply(sys.argv[1], embedding_dim=int(sys.argv[2])))"
    )
    subprocess.run(
        [sys.executable, "-c", script, url, str(DIMS)],
        cwd=code,
        env=dict(os.environ, PYTHONPATH=str(code)),
        check=True,
    )


def with_database(url: str, name: str) -> str:
    scheme, rest = url.split("://", 1)
    head, _, tail = rest.partition("/")
    query = tail.partition("?")[2]
    return f"{scheme}://{head}/{name}" + (f"?{query}" if query else "")


def read_dumps(folder: Path) -> dict[str, dict[str, Any]]:
    """Each phase's callgrind dump: its file and its total instructions (Ir)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("callgrind.out*")):
        text = path.read_text(errors="replace")
        desc = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
        totals = re.search(r"^totals: (\d+)", text, re.M) or re.search(
            r"^summary: (\d+)", text, re.M
        )
        if desc and totals and desc.group(1) in PHASES:
            found[desc.group(1)] = {"file": path, "ir": int(totals.group(1))}
    return found


def run_way(
    code: Path,
    *,
    db_url: str,
    redis_url: str,
    embed_url: str,
    helper: Path | None,
    out: Path,
    turns: int,
    batch: int,
    queries: int,
    run: str,
    native: bool = False,
) -> dict[str, Any]:
    """The workload under callgrind with ``code``'s checkout; each phase's Ir.
    ``native``: without valgrind (to try the workload; nothing counted; ``helper``
    None)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENGRAM_", "OTEL_")) and k != "PYTHONPATH"
    }
    env.update(
        {
            "PYTHONPATH": str(code),
            "PYTHONHASHSEED": "0",
            "HF_HUB_OFFLINE": "1",
            **({"ENGRAM_CG_HELPER": str(helper)} if helper is not None else {}),
            "ENGRAM_DATABASE_URL": db_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_STREAM_PREFIX": f"{run}:",
            "ENGRAM_DATA_DIR": str(out / "data"),
            "ENGRAM_LOG_LEVEL": "WARNING",
            "ENGRAM_EMBEDDING_PROVIDER": "ollama",
            "ENGRAM_EMBEDDING_URL": embed_url,
            "ENGRAM_EMBEDDING_MODEL": "nomic-embed-text",
            "ENGRAM_EMBEDDING_DIM": str(DIMS),
            "ENGRAM_SECRET_KEY": "bench-secret-key",
            "ENGRAM_WARM_UP": "false",
            "ENGRAM_CONSUMER_BATCH": str(batch),
            "ENGRAM_DB_POOL_MIN": "1",
            "ENGRAM_DB_POOL_MAX": "4",
        }
    )
    grind = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",  # start-up and warm-ups run uninstrumented (faster)
        f"--callgrind-out-file={out}/callgrind.out.%p",
    ]
    cmd = [
        *([] if native else grind),
        sys.executable,
        "-c",
        WORKLOAD,
        str(turns),
        str(batch),
        str(queries),
        run,
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, check=False)
    (out / "stderr.txt").write_text(proc.stderr)
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line.removeprefix("RESULT "))
    if result is None:
        raise RuntimeError(f"workload in {code} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    if native:
        return {"seconds": round(time.perf_counter() - started), "checks": result}
    dumps = read_dumps(out)
    missing = [p for p in PHASES if p not in dumps]
    if missing:
        raise RuntimeError(f"no callgrind dump for {missing} in {out}")
    return {
        "seconds": round(time.perf_counter() - started),
        "checks": result,
        "ir": {p: dumps[p]["ir"] for p in PHASES},
        "files": {p: str(dumps[p]["file"]) for p in PHASES},
    }


def per_op(ir: dict[str, int], turns: int, queries: int) -> dict[str, float]:
    return {p: ir[p] / (turns if p in ("ingest", "embed") else queries) for p in PHASES}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True, help="checkout of the code before tracing")
    p.add_argument(
        "--new",
        type=Path,
        help="the checkout compared with --old (and the others): by default this one, "
        "named 'off' (tracing off); given, named 'new'",
    )
    p.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a further checkout run beside them, compared with --old (repeatable)",
    )
    p.add_argument(
        "--name", default="trace_cost", help="bench/results/NAME.json (default trace_cost)"
    )
    p.add_argument(
        "--without",
        type=Path,
        help="a control: a checkout of this code with tracing's hooks taken out of its hot "
        "paths (what is left of a difference to --old is not tracing's)",
    )
    p.add_argument("--turns", type=int, default=400, help="turns ingested and embedded")
    p.add_argument("--batch", type=int, default=100, help="turns per consumer batch")
    p.add_argument("--queries", type=int, default=10, help="requests of each kind")
    p.add_argument("--repeats", type=int, default=2, help="runs of each way")
    p.add_argument("--parallel", type=int, default=2, help="callgrind runs at once")
    p.add_argument("--keep", type=Path, help="keep the callgrind files here")
    p.add_argument(
        "--native", action="store_true", help="run the workload once per way without valgrind"
    )
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        p.error("valgrind is needed (apt-get install valgrind)")
    old = args.old.resolve()
    codes = _codes(args)
    if len(codes) < 2 + len(args.also) + (args.without is not None):
        p.error("every way needs its own name (--also NAME=PATH; not old, new, off, without)")
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-trace-cost-"))
    keep = args.keep.resolve() if args.keep else tmp / "callgrind"
    pg = bench_postgres(tmp / "pg")
    rd = EmbeddedRedis(tmp / "redis", port=free_port())
    server = EmbeddingServer()
    runs: dict[str, list[dict[str, Any]]] = {w: [] for w in codes}
    try:
        admin_url = pg.start()
        redis_url = rd.start(persistent=False)
        helper = None if args.native else build_helper(tmp)
        for way, code in codes.items():
            asyncio.run(_create(admin_url, f"tpl_{way}"))
            migrate(code, with_database(admin_url, f"tpl_{way}"))
        jobs = []
        for r in range(1 if args.native else args.repeats):
            for way, code in codes.items():
                name = f"{way}{r + 1}"
                db = asyncio.run(_create(admin_url, name, template=f"tpl_{way}"))
                jobs.append((way, name, code, db))
        print(
            f"bench/trace_cost: {args.turns} turns (batches of {args.batch}), {args.queries} "
            f"requests of each kind; {len(jobs)} callgrind runs, {args.parallel} at once; "
            f"old = {old}"
        )
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            futures = {
                pool.submit(
                    run_way,
                    code,
                    db_url=db,
                    redis_url=redis_url,
                    embed_url=server.url,
                    helper=helper,
                    out=keep / name,
                    turns=args.turns,
                    batch=args.batch,
                    queries=args.queries,
                    run=name,
                    native=args.native,
                ): (way, name)
                for way, name, code, db in jobs
            }
            for f in concurrent.futures.as_completed(futures):
                way, name = futures[f]
                try:
                    got = f.result()
                except RuntimeError as e:  # e.g. killed from outside: the others go on
                    print(f"{name}: FAILED, left out: {str(e)[:300]}", flush=True)
                    continue
                got["run"] = name
                runs[way].append(got)
                if args.native:
                    print(f"{name} (native): {got['seconds']} s, checks {got['checks']}")
                    continue
                ops = per_op(got["ir"], args.turns, args.queries)
                print(
                    f"{name}: {got['seconds']} s, checks {got['checks']}; Ir per op "
                    + ", ".join(f"{k} {v:,.0f}" for k, v in ops.items()),
                    flush=True,
                )
    finally:
        server.stop()
        rd.stop()
        pg.stop()
        # the servers' folders, the helper; the callgrind files too unless --keep
        shutil.rmtree(tmp, ignore_errors=True)
    if args.native:
        return 0
    for way in runs:
        runs[way].sort(key=lambda g: g["run"])
    if not all(runs.values()):
        print("a way has no run left: nothing to compare")
        return 1
    return report(args, runs)


async def _create(admin_url: str, name: str, template: str | None = None) -> str:
    conn = await asyncpg.connect(admin_url)
    try:
        tpl = f' TEMPLATE "{template}"' if template else ""
        await conn.execute(f'CREATE DATABASE "{name}"{tpl}')
    finally:
        await conn.close()
    return with_database(admin_url, name)


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> int:
    med = {
        way: {p: statistics.median(g["ir"][p] for g in gots) for p in PHASES}
        for way, gots in runs.items()
    }
    ops = {way: per_op(m, args.turns, args.queries) for way, m in med.items()}
    new = _new(args)
    # the new way over old (and over without), each --also way over old
    pairs = [(new, w) for w in runs if w in ("old", "without")]
    pairs += [(w, "old") for w in runs if w not in (new, "old", "without")]
    ratio = {(a, b): {p: med[a][p] / med[b][p] for p in PHASES} for a, b in pairs}
    spread = {
        way: {
            p: (max(g["ir"][p] for g in gots) - min(g["ir"][p] for g in gots)) / med[way][p]
            for p in PHASES
        }
        for way, gots in runs.items()
    }
    print(
        table(
            [
                (
                    p,
                    *(f"{ops[w][p]:,.0f}" for w in runs),
                    *(f"{ratio[k][p]:.4f}" for k in pairs),
                    *(f"{spread[w][p]:.2%}" for w in runs),
                )
                for p in PHASES
            ],
            (
                "phase: Ir per op",
                *runs,
                *(f"{a}/{b}" for a, b in pairs),
                *(f"{w} spread" for w in runs),
            ),
        )
    )
    print(
        table(
            [(p, *(f"{med[w][p]:,.0f}" for w in runs)) for p in PHASES],
            ("phase: Ir in all (median)", *runs),
        )
    )
    result = {
        "method": "callgrind instruction counts (Ir) of one Python process per run",
        "ways": {w: {"code": str(c), "commit": _commit(c)} for w, c in _codes(args).items()},
        "turns": args.turns,
        "batch": args.batch,
        "queries": args.queries,
        "repeats": args.repeats,
        "median_ir": med,
        "ir_per_op": {w: {p: round(v) for p, v in o.items()} for w, o in ops.items()},
        **{f"{a}_over_{b}": {p: round(v, 4) for p, v in ratio[(a, b)].items()} for a, b in pairs},
        "spread_between_repeats": {
            w: {p: round(v, 4) for p, v in s.items()} for w, s in spread.items()
        },
        "runs": {
            w: [{k: v for k, v in g.items() if k != "files"} for g in gots]
            for w, gots in runs.items()
        },
        **({"target_off_over_old": 1.02} if new == "off" else {}),
    }
    path = write_result(args.name, result)
    kept = f"callgrind files in {args.keep.resolve()}" if args.keep else "callgrind files removed"
    print(f"-> {path}; {kept}")
    return 0


def _codes(args: argparse.Namespace) -> dict[str, Path]:
    codes = {"old": args.old.resolve(), _new(args): (args.new or ROOT).resolve()}
    if args.without is not None:
        codes["without"] = args.without.resolve()
    for also in args.also:
        name, _, path = also.partition("=")
        if name and path and name not in ("old", "new", "off", "without"):
            codes[name] = Path(path).resolve()
    return codes


def _new(args: argparse.Namespace) -> str:
    """The compared checkout's name: ``off`` (this code, tracing off) unless --new."""
    return "off" if args.new is None else "new"


def _commit(code: Path) -> str:
    """The checkout's commit, and whether it holds uncommitted changes (``--without``:
    tracing's hooks edited out)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=code, capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "HEAD") + (" with uncommitted changes" if dirty else "")


if __name__ == "__main__":
    raise SystemExit(main())
