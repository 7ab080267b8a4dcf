"""OpenTelemetry traces across the pipeline: one trace follows a turn from its XADD
to searchable (docs/traces.md).

Off unless an OTLP endpoint is configured (``ENGRAM_TRACES_ENDPOINT``, or the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``; ``CommonSettings.traces_endpoint``). Off
costs nothing on the hot path: no SDK is imported, no span is made; each entry
point (a publish, a consumed batch, an HTTP request) checks one boolean.

The context travels inside the events: ``Event.trace`` holds a W3C ``traceparent``
(``shared/events.py``). What may be relied on:

- :meth:`Tracing.producing` (the ``Publisher``) gives each event a ``send
  <stream>`` span, a child of the event's own ``trace`` when it has one (a
  consumer continuing its trace, a replay), else of the current span (an HTTP
  request), else a new trace; the event goes out carrying that span's context;
- :meth:`Tracing.consuming` (the stream adapter) gives each event of a batch a
  ``process <stream>`` span, a child of its ``trace`` (a new trace when it has
  none or an unreadable one), open until the use case returns: its writes are
  committed by then;
- inside a use case, :func:`carry` stamps an event it publishes with the trace of
  the event that caused it, and :func:`within` makes that event's span current
  (what is published inside continues it). Both do nothing when tracing is off.
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import (
    Span,
    SpanKind,
    StatusCode,
    Tracer,
    format_span_id,
    format_trace_id,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.events import BatchResult, Event
from shared.settings import CommonSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

TRACEPARENT = "traceparent"
MESSAGING_SYSTEM = "redis"

_PROPAGATOR = TraceContextTextMapPropagator()
# The consumer span of each event of the batch being handled, by event id; None
# outside a traced batch (tracing off: never set).
_EVENT_SPANS: contextvars.ContextVar[dict[uuid.UUID, Span] | None] = contextvars.ContextVar(
    "engram_event_spans", default=None
)

E = TypeVar("E", bound=Event)


def traceparent(span: Span) -> str | None:
    """The W3C ``traceparent`` of ``span`` (None for a span with no valid context)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{format_trace_id(ctx.trace_id)}-{format_span_id(ctx.span_id)}-{ctx.trace_flags:02x}"


def context_of(trace: str | None) -> Context | None:
    """The parent context a ``traceparent`` names; None when there is none. A value
    that is not a valid ``traceparent`` gives an empty context (a new trace starts):
    an event is never refused for its trace."""
    if not trace:
        return None
    return _PROPAGATOR.extract({TRACEPARENT: trace})


class Tracing:
    """The spans of one process (one service), or none at all.

    Built once per process by :meth:`from_settings` (``Runtime`` does it) and passed
    to what makes spans. ``enabled`` False: every method is a no-op and nothing of
    the SDK exists."""

    def __init__(self, tracer: Tracer | None = None, provider: TracerProvider | None = None):
        self.enabled = tracer is not None
        self._tracer = tracer
        self._provider = provider

    @classmethod
    def from_settings(
        cls, settings: CommonSettings, service: str, *, exporter: SpanExporter | None = None
    ) -> Tracing:
        """Spans exported by OTLP/HTTP (protobuf) to ``settings.traces_endpoint``, in
        batches from a background thread, sampled at ``traces_sample_ratio`` (a child
        follows its parent's decision); no endpoint = :data:`OFF`. ``exporter``: spans
        go to it as each one ends instead (tests: the SDK's ``InMemorySpanExporter``)."""
        endpoint = settings.traces_endpoint
        if exporter is None and not endpoint:
            return OFF
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        provider = TracerProvider(
            resource=Resource.create(
                {"service.name": f"engram-{service}", "service.namespace": "engram"}
            ),
            sampler=ParentBased(TraceIdRatioBased(settings.traces_sample_ratio)),
        )
        if exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            assert endpoint is not None
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(endpoint)))
            )
        return cls(provider.get_tracer("engram"), provider)

    def flush(self, timeout_ms: int = 5000) -> None:
        """Export what is still buffered (a service stopping)."""
        if self._provider is not None:
            self._provider.force_flush(timeout_ms)

    # -- producers ---------------------------------------------------------------

    def producing(self, stream: str, events: Sequence[E]) -> tuple[list[E], list[Span]]:
        """A ``send <stream>`` span per event and the event stamped with it; the
        caller ends the spans with :meth:`sent` or :meth:`failed`."""
        assert self._tracer is not None
        spans: list[Span] = []
        stamped: list[E] = []
        for event in events:
            span = self._send_span(stream, context_of(event.trace), event.event_id)
            spans.append(span)
            stamped.append(event.model_copy(update={"trace": traceparent(span)}))
        return stamped, spans

    def producing_raw(
        self, stream: str, payloads: Sequence[bytes]
    ) -> tuple[list[bytes], list[Span]]:
        """:meth:`producing` for already-encoded events (``engram publish``, a replay):
        each JSON object gets its span's ``trace``."""
        import json

        assert self._tracer is not None
        spans: list[Span] = []
        stamped: list[bytes] = []
        for payload in payloads:
            try:
                obj = json.loads(payload)
            except ValueError:
                obj = None
            if not isinstance(obj, dict):  # not an event: sent as it is, the consumer says why
                spans.append(self._send_span(stream, None, None))
                stamped.append(payload)
                continue
            trace = obj.get("trace")
            span = self._send_span(
                stream, context_of(trace if isinstance(trace, str) else None), obj.get("event_id")
            )
            spans.append(span)
            obj["trace"] = traceparent(span)
            stamped.append(json.dumps(obj, separators=(",", ":")).encode())
        return stamped, spans

    def _send_span(self, stream: str, parent: Context | None, event_id: object) -> Span:
        assert self._tracer is not None
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "send",
            "messaging.destination.name": stream,
        }
        if event_id is not None:
            attributes["engram.event_id"] = str(event_id)
        return self._tracer.start_span(
            f"send {stream}", context=parent, kind=SpanKind.PRODUCER, attributes=attributes
        )

    @staticmethod
    def sent(spans: Sequence[Span], entry_ids: Sequence[str]) -> None:
        for span, entry_id in zip(spans, entry_ids, strict=False):
            span.set_attribute("messaging.message.id", entry_id)
            span.end()

    @staticmethod
    def failed(spans: Sequence[Span], exc: BaseException) -> None:
        for span in spans:
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            span.end()

    # -- consumers ---------------------------------------------------------------

    @contextlib.contextmanager
    def consuming(
        self,
        events: Sequence[object],
        *,
        stream: str,
        group: str,
        entry_ids: Sequence[str],
    ) -> Iterator[Callable[[BatchResult | None], None]]:
        """A ``process <stream>`` span per event, open while the block runs; inside it
        :func:`carry` and :func:`within` find them. Yields a function to call with the
        use case's result: a refused event's span is marked as an error with the
        reason, a dropped one says so. An exception ends every span as an error."""
        assert self._tracer is not None
        spans: dict[uuid.UUID, Span] = {}
        ordered: list[Span] = []
        for event, entry_id in zip(events, entry_ids, strict=True):
            if not isinstance(event, Event):
                continue
            span = self._tracer.start_span(
                f"process {stream}",
                context=context_of(event.trace),
                kind=SpanKind.CONSUMER,
                attributes={
                    "messaging.system": MESSAGING_SYSTEM,
                    "messaging.operation.type": "process",
                    "messaging.destination.name": stream,
                    "messaging.consumer.group.name": group,
                    "messaging.message.id": entry_id,
                    "messaging.batch.message_count": len(events),
                    "engram.event_id": str(event.event_id),
                },
            )
            spans.setdefault(event.event_id, span)
            ordered.append(span)

        def result(outcome: BatchResult | None) -> None:
            if outcome is None:
                return
            for pos, reason in outcome.refused.items():
                if pos < len(ordered):
                    ordered[pos].set_status(StatusCode.ERROR, reason)
            for pos in outcome.dropped:
                if pos < len(ordered):
                    ordered[pos].set_attribute("engram.dropped", True)

        token = _EVENT_SPANS.set(spans)
        try:
            yield result
        except BaseException as exc:
            for span in ordered:
                span.record_exception(exc)
                span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            _EVENT_SPANS.reset(token)
            for span in ordered:
                span.end()

    # -- HTTP --------------------------------------------------------------------

    def server_span(self, scope: Scope) -> Span:
        """A ``SERVER`` span for an HTTP request, a child of the caller's
        ``traceparent`` header when it sends one."""
        assert self._tracer is not None
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        method = str(scope.get("method", ""))
        return self._tracer.start_span(
            method,
            context=_PROPAGATOR.extract(headers),
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": method,
                "url.scheme": str(scope.get("scheme", "http")),
            },
        )


OFF = Tracing()
"""Tracing switched off: the one instance every process without an endpoint shares."""


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (``http://host:4318`` →
    ``http://host:4318/v1/traces``), as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is read; a URL
    that already ends in ``/v1/traces`` is kept."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def active() -> bool:
    """Whether the batch being handled is traced (a use case may then split what it
    publishes by cause, :func:`traces_by_cause`)."""
    return _EVENT_SPANS.get() is not None


def traceparent_of(cause: Event) -> str | None:
    """The ``traceparent`` of ``cause``'s consumer span in the batch being handled."""
    spans = _EVENT_SPANS.get()
    if spans is None:
        return None
    span = spans.get(cause.event_id)
    return traceparent(span) if span is not None else None


def traces_by_cause(causes: Sequence[Event]) -> dict[uuid.UUID, str | None]:
    """For each cause (by event id) in the batch being handled, the ``traceparent`` what
    it causes should carry: its own consumer span's when that span is sampled; every
    unsampled cause shares one unsampled context (what continues it is not recorded
    either), so a use case that splits what it publishes by trace sends one event
    more per *sampled* cause only."""
    spans = _EVENT_SPANS.get()
    if spans is None:
        return {}
    out: dict[uuid.UUID, str | None] = {}
    unsampled: str | None = None
    for cause in causes:
        span = spans.get(cause.event_id)
        if span is None:
            out[cause.event_id] = None
        elif span.get_span_context().trace_flags.sampled:
            out[cause.event_id] = traceparent(span)
        else:
            unsampled = unsampled or traceparent(span)
            out[cause.event_id] = unsampled
    return out


def carry(event: E, cause: Event) -> E:
    """``event`` continuing the trace of ``cause`` (an event of the batch being
    handled): its publish span becomes a child of ``cause``'s. Tracing off, or
    ``cause`` not traced: ``event`` as it is."""
    trace = traceparent_of(cause)
    return event if trace is None else event.model_copy(update={"trace": trace})


@contextlib.contextmanager
def within(cause: Event) -> Iterator[None]:
    """Make ``cause``'s consumer span current while the block runs: what is published
    inside (and any span started) continues its trace. Tracing off: nothing."""
    spans = _EVENT_SPANS.get()
    span = spans.get(cause.event_id) if spans is not None else None
    if span is None:
        yield
        return
    token = attach(set_span_in_context(span))
    try:
        yield
    finally:
        detach(token)


class TraceRequests:
    """ASGI middleware: a ``SERVER`` span per HTTP request, named ``METHOD route``
    (``route_of`` gives the matched route's template once the app has run), current
    while the app runs, so what a request publishes continues its trace. Paths in
    ``skip`` (``/health``, ``/metrics``: scrapes) are not traced. Installed only when
    tracing is on."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tracing: Tracing,
        route_of: Callable[[Mapping[str, object]], str],
        skip: frozenset[str] = frozenset({"/health", "/metrics"}),
    ) -> None:
        self.app = app
        self.tracing = tracing
        self.route_of = route_of
        self.skip = skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.skip:
            await self.app(scope, receive, send)
            return
        span = self.tracing.server_span(scope)
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        token = attach(set_span_in_context(span))
        try:
            await self.app(scope, receive, send_status)
        except Exception as exc:
            span.record_exception(exc)
            raise
        finally:
            detach(token)
            route = self.route_of(scope)
            span.update_name(f"{scope.get('method', '')} {route}")
            span.set_attribute("http.route", route)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(StatusCode.ERROR)
            span.end()
