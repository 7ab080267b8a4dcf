"""Traces across the pipeline (shared/tracing.py, docs/traces.md), on real PostgreSQL and
Redis with the SDK's in-memory exporter: one trace per turn from its XADD to its
vector written (searchable), the context carried inside the stream events; an
episode's close followed through the extractor; an HTTP request continued; and
tracing off makes no span and loads no SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import SecretStr

from services.embedder.app import create_app as embedder_app
from services.embedder.settings import EmbedderSettings
from services.extractor.app import create_app as extractor_app
from services.extractor.settings import ExtractorSettings
from services.ingest.app import create_app as ingest_app
from services.ingest.settings import IngestSettings
from services.query.app import create_app as query_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.events import BatchResult, EpisodeClosed, TurnReceived, encode, turn_adapter
from shared.settings import CommonSettings
from shared.stream_registry import TURNS
from shared.streams import EVENT_FIELD, Publisher
from shared.tracing import OFF, Tracing, context_of, traces_url
from tests.embedder.scripted import ScriptedServer
from tests.support import ROOT, running, wait_for

# An entry is delivered once here: a batch slowed by a loaded machine is not taken over
# (a redelivery would be a second, legitimate 'process' span in the turn's trace).
SLOW_BATCH_MS = 60_000


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def server(settings: CommonSettings) -> Iterator[ScriptedServer]:
    s = ScriptedServer(dims=settings.embedding_dim).start()
    yield s
    s.stop()


def _embedder_settings(
    make_settings: Callable[..., Any], server: ScriptedServer, prefix: str
) -> Any:
    """The system provider on the scripted server: its calls run in line, so the
    embed span ends once the vectors are written."""
    return make_settings(
        EmbedderSettings,
        stream_prefix=prefix,
        claim_idle_ms=SLOW_BATCH_MS,
        embedding_provider="ollama",
        embedding_url=server.base_url("ollama"),
        embedding_model="nomic-embed-text",
        secret_key=SecretStr("k"),
    )


def _turn(user_id: str, content: str, chat: str = "c1") -> TurnReceived:
    return TurnReceived(
        user_id=user_id, provider="test", chat_id=chat, role="user", content=content
    )


def _one(spans: Sequence[ReadableSpan], name: str, **attrs: object) -> ReadableSpan:
    found = [
        s
        for s in spans
        if s.name == name and all((s.attributes or {}).get(k) == v for k, v in attrs.items())
    ]
    assert len(found) == 1, f"{name} {attrs}: {[(s.name, s.attributes) for s in spans]}"
    return found[0]


def _trace(spans: Sequence[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    return [s for s in spans if s.context is not None and s.context.trace_id == trace_id]


def _child_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.parent is not None and parent.context is not None and child.context is not None
    return (
        child.parent.span_id == parent.context.span_id
        and child.context.trace_id == parent.context.trace_id
    )


def _service(span: ReadableSpan) -> object:
    return span.resource.attributes.get("service.name")


async def _ready(pool: asyncpg.Pool, event_ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    rows = await pool.fetch(
        "SELECT event_id, embedded_at FROM messages"
        " WHERE event_id = ANY($1::uuid[]) AND embedding_state = 'ready'",
        event_ids,
    )
    return rows if len(rows) == len(event_ids) else []


def _ns(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000) * 1000


async def test_each_turn_is_one_trace_from_its_publish_to_its_vector_written(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    server: ScriptedServer,
    exporter: InMemorySpanExporter,
    user_id: str,
) -> None:
    ingest: IngestSettings = make_settings(IngestSettings, claim_idle_ms=SLOW_BATCH_MS)
    es = _embedder_settings(make_settings, server, ingest.stream_prefix)
    platform = Tracing.from_settings(ingest, "platform", exporter=exporter)
    turns = [_turn(user_id, "I moved to Lisbon in May"), _turn(user_id, "my cat is Miso", "c2")]
    async with (
        running(
            ingest_app(ingest, tracing=Tracing.from_settings(ingest, "ingest", exporter=exporter))
        ),
        running(embedder_app(es, tracing=Tracing.from_settings(es, "embedder", exporter=exporter))),
    ):
        # both turns in one XADD round trip: each still gets a trace of its own
        await Publisher(redis, ingest, platform).publish(TURNS, turns)
        rows = await wait_for(lambda: _ready(pool, [t.event_id for t in turns]), timeout=60)
        # the embed span ends as the handler returns, just after the commit
        await wait_for(
            lambda: _async(
                sum(s.name == "process embed" for s in exporter.get_finished_spans()) >= 1
            ),
            message="the embed spans",
        )
    spans = exporter.get_finished_spans()
    embedded_at = {r["event_id"]: r["embedded_at"] for r in rows}
    trace_ids = set()
    for turn in turns:
        send = _one(spans, "send turns", **{"engram.event_id": str(turn.event_id)})
        assert send.kind is SpanKind.PRODUCER and send.parent is None  # a new trace
        assert send.context is not None
        trace_ids.add(send.context.trace_id)
        mine = _trace(spans, send.context.trace_id)
        process = _one(mine, "process turns")
        assert process.kind is SpanKind.CONSUMER and _child_of(process, send)
        assert (process.attributes or {})["engram.event_id"] == str(turn.event_id)
        assert (process.attributes or {})["messaging.consumer.group.name"] == "ingest"
        send_embed = _one(mine, "send embed")
        assert _child_of(send_embed, process)
        embed = _one(mine, "process embed")
        assert _child_of(embed, send_embed)
        assert embed.status.status_code is not StatusCode.ERROR
        # open until the turn's vector was written: searchable when it ends
        assert embed.end_time is not None and embed.end_time >= _ns(embedded_at[turn.event_id])
        assert [_service(s) for s in (send, process, send_embed, embed)] == [
            "engram-platform",
            "engram-ingest",
            "engram-ingest",
            "engram-embedder",
        ]
        assert {s.name for s in mine} == {
            "send turns",
            "process turns",
            "send embed",
            "process embed",
        }
    assert len(trace_ids) == 2  # the second turn is a trace of its own


async def _async(value: Any) -> Any:
    return value


async def test_an_episode_close_is_followed_through_the_extractor_to_its_summary_embedded(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    server: ScriptedServer,
    exporter: InMemorySpanExporter,
    user_id: str,
) -> None:
    ingest: IngestSettings = make_settings(IngestSettings, claim_idle_ms=SLOW_BATCH_MS)
    prefix = ingest.stream_prefix
    es = _embedder_settings(make_settings, server, prefix)
    xs: ExtractorSettings = make_settings(
        ExtractorSettings, stream_prefix=prefix, sweep_interval_s=3600, claim_idle_ms=SLOW_BATCH_MS
    )
    platform = Publisher(
        redis, ingest, Tracing.from_settings(ingest, "platform", exporter=exporter)
    )
    async with (
        running(
            ingest_app(ingest, tracing=Tracing.from_settings(ingest, "ingest", exporter=exporter))
        ),
        running(embedder_app(es, tracing=Tracing.from_settings(es, "embedder", exporter=exporter))),
        running(
            extractor_app(xs, tracing=Tracing.from_settings(xs, "extractor", exporter=exporter))
        ),
    ):
        turns = [_turn(user_id, f"I started learning the cello, lesson {i}") for i in range(3)]
        await platform.publish(TURNS, turns)
        await wait_for(lambda: _ready(pool, [t.event_id for t in turns]), timeout=60)
        # closed after its turns (a close records its time: docs/contracts.md)
        close = EpisodeClosed(user_id=user_id, provider="test", chat_id="c1")
        await platform.publish("episodes", [close])

        async def summary_embedded() -> bool:
            state = await pool.fetchval(
                "SELECT embedding_state FROM episodes WHERE user_id = $1", user_id
            )
            return state == "ready"

        await wait_for(summary_embedded, timeout=60, message="the summary embedded")

        def chain() -> list[ReadableSpan]:
            spans = exporter.get_finished_spans()
            sends = [
                s
                for s in spans
                if s.name == "send episodes"
                and (s.attributes or {}).get("engram.event_id") == str(close.event_id)
            ]
            if not sends or sends[0].context is None:
                return []
            mine = _trace(spans, sends[0].context.trace_id)
            # the extractor's span ends when its use case returns, which can be after the
            # embedder has already written the summary's vector
            done = {s.name for s in mine}
            return mine if {"process extract", "process embed"} <= done else []

        mine = await wait_for(lambda: _async(chain()), message="the close's trace")
    send = _one(mine, "send episodes")
    process = _one(mine, "process episodes")
    send_extract = _one(mine, "send extract")
    extract = _one(mine, "process extract")
    send_embed = _one(mine, "send embed")
    embed = _one(mine, "process embed")
    for child, parent in (
        (process, send),
        (send_extract, process),
        (extract, send_extract),
        (send_embed, extract),
        (embed, send_embed),
    ):
        assert _child_of(child, parent), (child.name, parent.name)
    assert _service(extract) == "engram-extractor"
    assert not any(s.name == "process turns" for s in mine)  # the turns have traces of their own


async def test_an_http_request_continues_the_callers_trace_into_the_turn_it_publishes(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    exporter: InMemorySpanExporter,
    user_id: str,
) -> None:
    qs: QuerySettings = make_settings(QuerySettings, warm_up=False)
    _, secret = await create_key(pool, user_id=user_id)
    caller_trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    app = query_app(qs, tracing=Tracing.from_settings(qs, "query", exporter=exporter))
    async with running(app) as client:
        r = await client.post(
            "/v1/turns",
            json={"chat_id": "c1", "role": "user", "content": "I like tea"},
            headers={"Authorization": f"Bearer {secret}", "traceparent": caller_trace},
        )
        assert r.status_code in (200, 201, 202), r.text
        await client.get("/health")  # scrapes are not traced
    spans = exporter.get_finished_spans()
    request = _one(spans, "POST /v1/turns")
    assert request.kind is SpanKind.SERVER and request.context is not None
    assert request.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert request.parent is not None and request.parent.span_id == 0xB7AD6B7169203331
    assert (request.attributes or {})["http.response.status_code"] == r.status_code
    send = _one(spans, "send turns")
    assert _child_of(send, request)
    assert not any("/health" in s.name for s in spans)
    # the event on the stream carries the send span's context
    [(_, fields)] = await redis.xrange(TURNS.key(qs, 0))
    event = turn_adapter.validate_json(fields[EVENT_FIELD])
    assert event.user_id == user_id and send.context is not None
    assert event.trace == (f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-01")


async def test_a_turn_without_trace_context_is_stored_and_starts_its_trace_at_ingest(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    exporter: InMemorySpanExporter,
    user_id: str,
) -> None:
    """A platform that does not trace (an event as it was before ``trace`` existed),
    and one whose ``trace`` is not a traceparent: both stored, each a trace of its own."""
    ingest: IngestSettings = make_settings(IngestSettings, claim_idle_ms=SLOW_BATCH_MS)
    plain = _turn(user_id, "no trace here")
    garbled = _turn(user_id, "a garbled trace")
    payloads = [
        encode(plain),
        json.dumps({**json.loads(encode(garbled)), "trace": "00-zz"}).encode(),
    ]
    assert "trace" not in json.loads(payloads[0])
    for p in payloads:
        await redis.xadd(TURNS.key(ingest, 0), {EVENT_FIELD: p})
    async with running(
        ingest_app(ingest, tracing=Tracing.from_settings(ingest, "ingest", exporter=exporter))
    ):
        await wait_for(
            lambda: pool.fetchval(
                "SELECT count(*) = 2 FROM messages WHERE event_id = ANY($1::uuid[])",
                [plain.event_id, garbled.event_id],
            ),
            message="both turns stored",
        )
    spans = exporter.get_finished_spans()
    roots = [
        _one(spans, "process turns", **{"engram.event_id": str(t.event_id)})
        for t in (plain, garbled)
    ]
    assert all(s.parent is None for s in roots)
    assert roots[0].context is not None and roots[1].context is not None
    assert roots[0].context.trace_id != roots[1].context.trace_id
    # the embed request each one caused continues its trace
    for root in roots:
        assert root.context is not None
        assert _one(_trace(spans, root.context.trace_id), "send embed").parent is not None


async def test_tracing_off_makes_no_span_and_puts_no_trace_on_the_stream(
    pool: asyncpg.Pool,
    redis: aioredis.Redis,
    make_settings: Callable[..., Any],
    user_id: str,
) -> None:
    ingest: IngestSettings = make_settings(IngestSettings, claim_idle_ms=SLOW_BATCH_MS)
    assert ingest.traces_endpoint is None
    app = ingest_app(ingest)
    rt = app.state.runtime
    assert rt.tracing is OFF and not OFF.enabled
    turn = _turn(user_id, "untraced")
    async with running(app):
        assert rt.publisher._tracing is OFF
        await rt.publisher.publish(TURNS, [turn])
        await wait_for(
            lambda: pool.fetchval(
                "SELECT count(*) = 1 FROM messages WHERE event_id = $1", turn.event_id
            ),
            message="the turn stored",
        )
        entries = await redis.xrange(TURNS.key(ingest, 0)) + await redis.xrange(
            ingest.stream("embed")
        )
    assert entries and all(b'"trace"' not in fields[EVENT_FIELD] for _, fields in entries)


def test_with_tracing_off_a_service_never_loads_the_sdk() -> None:
    """No endpoint: building every service imports neither the SDK's tracing nor an
    exporter (redis-py imports the SDK's metrics by itself when the SDK is installed)."""
    code = """
import sys
from services.ingest.app import create_app as ingest
from services.embedder.app import create_app as embedder
from services.extractor.app import create_app as extractor
from services.query.app import create_app as query
from services.query.settings import QuerySettings
from services.ingest.settings import IngestSettings
from services.embedder.settings import EmbedderSettings
from services.extractor.settings import ExtractorSettings
url = dict(database_url="postgresql://x@localhost/x", redis_url="redis://localhost:1")
ingest(IngestSettings(**url)); embedder(EmbedderSettings(**url))
extractor(ExtractorSettings(**url)); query(QuerySettings(**url, warm_up=False))
print(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk.trace") or "exporter" in m))
"""
    env = {
        k: v for k, v in __import__("os").environ.items() if not k.startswith(("OTEL_", "ENGRAM_"))
    }
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_endpoint_is_engrams_setting_or_the_standard_otlp_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGRAM_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert CommonSettings().traces_endpoint is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert CommonSettings().traces_endpoint == "http://collector:4318"
    monkeypatch.setenv("ENGRAM_TRACES_ENDPOINT", "http://engram-collector:4318/")
    s = CommonSettings()
    assert s.traces_endpoint == "http://engram-collector:4318/"
    assert traces_url(s.traces_endpoint) == "http://engram-collector:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"
    tracing = Tracing.from_settings(s, "ingest")
    assert tracing.enabled
    tracing.flush(100)


def test_a_trace_that_is_not_a_traceparent_names_no_parent() -> None:
    ctx = context_of("not-a-traceparent")
    assert ctx is not None and not ctx  # an empty context: a new trace starts
    assert context_of(None) is None


def test_a_refused_events_span_is_an_error_with_its_reason_and_a_failed_batch_all_errors(
    settings: CommonSettings, exporter: InMemorySpanExporter
) -> None:
    tracing = Tracing.from_settings(settings, "ingest", exporter=exporter)
    turns = [_turn("u", "ok"), _turn("u", "refused"), _turn("u", "erased")]
    ids = ["1-0", "1-1", "1-2"]
    with tracing.consuming(turns, stream="turns", group="ingest", entry_ids=ids) as traced:
        traced(BatchResult(refused={1: "episode of another user"}, dropped={2}))
    ok, refused, dropped = exporter.get_finished_spans()
    assert ok.status.status_code is StatusCode.UNSET
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.status.description == "episode of another user"
    assert (dropped.attributes or {}).get("engram.dropped") is True
    exporter.clear()
    with (
        pytest.raises(RuntimeError),
        tracing.consuming(turns[:2], stream="turns", group="ingest", entry_ids=ids[:2]),
    ):
        raise RuntimeError("database away")
    assert [s.status.status_code for s in exporter.get_finished_spans()] == [StatusCode.ERROR] * 2
