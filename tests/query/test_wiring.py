"""The query service's wiring is built at start-up, not on a route's first request."""

from __future__ import annotations

from services.extractor.settings import ExtractorSettings
from services.ingest.settings import IngestSettings
from services.query.app import create_app
from services.query.facts_service import has_trigram
from services.query.settings import QuerySettings
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
