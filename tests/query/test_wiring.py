"""The query service's wiring is built at start-up, not on a route's first request."""

from __future__ import annotations

from typing import Any

import fastapi.dependencies.utils as fastapi_dependencies

from services.extractor.settings import ExtractorSettings
from services.ingest.settings import IngestSettings
from services.query.api import deps
from services.query.app import create_app
from services.query.memory.facts import has_trigram
from services.query.settings import QuerySettings
from tests.query.helpers import auth
from tests.support import running


async def test_decision_metrics_and_the_trigram_probe_exist_before_any_request(make_settings, pool):
    app = create_app(make_settings(QuerySettings))
    state = app.state.query
    assert state.decision_metrics is not None and state.rewrite is None  # no model configured
    async with running(app) as client:
        assert state.trigram == await has_trigram(pool)
        metrics = (await client.get("/metrics")).text
    assert "# TYPE engram_decision_warnings_total counter" in metrics


def test_one_setting_names_the_stale_window(monkeypatch):
    monkeypatch.setenv("ENGRAM_STALE_WINDOW_MINUTES", "12")
    assert IngestSettings().stale_window_minutes == 12
    assert ExtractorSettings().stale_window_minutes == 12
    assert "stale_after_minutes" not in ExtractorSettings.model_fields


async def test_the_memory_routes_run_no_dependency_in_a_worker_thread(
    make_settings, pool, user_id, monkeypatch
):
    """FastAPI runs a plain ``def`` dependency in a worker thread on every request: a hop
    to the thread pool and back for what is an attribute read (it was two a search)."""
    hopped: list[str] = []
    original = fastapi_dependencies.run_in_threadpool

    async def recording(call: Any, *args: Any, **kwargs: Any) -> Any:
        hopped.append(getattr(call, "__qualname__", repr(call)))
        return await original(call, *args, **kwargs)

    monkeypatch.setattr(fastapi_dependencies, "run_in_threadpool", recording)
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        added = await client.post(
            "/v1/memory/add", headers=h, json={"type": "fact", "content": "Likes tea"}
        )
        assert added.status_code == 200, added.text
        found = await client.post("/v1/memory/search", headers=h, json={"query": "tea"})
        assert found.status_code == 200, found.text
        assert (await client.get("/v1/memory/themes", headers=h)).status_code == 200
        # the recorder does see a synchronous dependency
        assert not hopped
        app.dependency_overrides[deps._read_pool] = deps.pool  # themes: a read
        assert (await client.get("/v1/memory/themes", headers=h)).status_code == 200
    assert hopped == ["pool"]


async def test_each_request_is_timed_by_its_route_and_status_class(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        found = await client.post("/v1/memory/search", headers=h, json={"query": "tea"})
        assert found.status_code == 200, found.text
        refused = await client.post("/v1/memory/search", json={"query": "tea"})
        assert refused.status_code == 401
        assert (await client.get("/v1/memory/items/not-a-uuid", headers=h)).status_code == 422
        metrics = (await client.get("/metrics")).text

    def count(route: str, status: str) -> float:
        prefix = (
            f'engram_http_request_seconds_count{{method="{"GET" if "items" in route else "POST"}",'
            f'route="{route}",status="{status}"}} '
        )
        lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
        return float(lines[0].split()[-1]) if lines else 0.0

    assert count("/v1/memory/search", "2xx") == 1
    assert count("/v1/memory/search", "4xx") == 1
    assert count("/v1/memory/items/{item_id}", "4xx") == 1
