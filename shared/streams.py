"""Redis Streams plumbing shared by every consumer.

Contract of a stream entry: one field, ``event``, holding an event's JSON
(see ``shared.events``). Delivery is at-least-once:

- a normal FastStream reader (consumer group, batched XREADGROUP) hands a batch
  to the use case; entries are acknowledged only after the use case returns,
  i.e. after its database transaction committed;
- a claiming reader (XAUTOCLAIM after ``claim_idle_ms``) takes over entries a
  dead or stuck consumer left pending, with their delivery count; a consumer
  still working on a batch resets its entries' idle time every third of that
  window, so a slow batch is never taken over and run twice beside itself;
- an entry that cannot be parsed goes to the ``dead`` stream at once; one that
  fails ``max_attempts`` deliveries goes there with the last error; both are
  then acknowledged so the consumer keeps going;
- a batch that fails is retried entry by entry, so one bad entry never holds
  back the good ones around it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import asyncpg
import redis.asyncio as aioredis
from faststream import AckPolicy, Context
from faststream.message import StreamMessage
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from pydantic import TypeAdapter, ValidationError

from shared.errors import InfrastructureError, InvalidEvent
from shared.events import Event, encode
from shared.metrics import ServiceMetrics
from shared.settings import CommonSettings

log = logging.getLogger(__name__)

EVENT_FIELD = b"event"
_MESSAGE = Context("message")
T = TypeVar("T")


@dataclass(frozen=True)
class Delivery(Generic[T]):
    """One parsed stream entry handed to a use case."""

    entry_id: str
    event: T


Rejections = dict[str, str]
"""Entry ids the use case refuses for good (e.g. a turn naming another user's
episode), with the reason; they are dead-lettered at once."""

Handler = Callable[[Sequence[Delivery[T]]], Awaitable[Rejections | None]]


def consumer_name(settings: CommonSettings, service: str) -> str:
    return settings.consumer_name or f"{service}-{socket.gethostname()}-{os.getpid()}"


class Publisher:
    """Appends events to streams; one pipeline round trip per call."""

    def __init__(self, redis: aioredis.Redis, settings: CommonSettings) -> None:
        self._redis = redis
        self._settings = settings

    async def publish(self, stream: str, events: Sequence[Event]) -> list[str]:
        """XADD each event to ``stream`` (a logical name such as ``turns``); return entry ids."""
        return await self.publish_many([(stream, events)])

    async def publish_many(self, batches: Sequence[tuple[str, Sequence[Event]]]) -> list[str]:
        """XADD events to several streams in one pipeline round trip; return entry ids."""
        pipe = self._redis.pipeline(transaction=False)
        keys = []
        for stream, events in batches:
            key = self._settings.stream(stream)
            keys.append(key)
            for event in events:
                pipe.xadd(
                    key,
                    {EVENT_FIELD: encode(event)},
                    maxlen=self._settings.stream_maxlen,
                    approximate=True,
                )
        if not len(pipe):
            return []
        try:
            ids = await pipe.execute()
        except (aioredis.RedisError, OSError) as exc:
            raise InfrastructureError(f"cannot publish to {', '.join(keys)}: {exc}") from exc
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]

    async def publish_raw(self, stream: str, payloads: Sequence[bytes]) -> list[str]:
        """XADD already-encoded JSON payloads (``engram publish``, dead-letter replay)."""
        key = self._settings.stream(stream)
        pipe = self._redis.pipeline(transaction=False)
        for payload in payloads:
            pipe.xadd(
                key,
                {EVENT_FIELD: payload},
                maxlen=self._settings.stream_maxlen,
                approximate=True,
            )
        ids = await pipe.execute()
        return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]


def _is_infrastructure(exc: BaseException) -> bool:
    return isinstance(
        exc,
        InfrastructureError
        | OSError
        | asyncio.TimeoutError
        | asyncpg.exceptions.InterfaceError
        | asyncpg.exceptions.PostgresConnectionError
        | asyncpg.exceptions.CannotConnectNowError
        | asyncpg.exceptions.TooManyConnectionsError
        | aioredis.ConnectionError,
    )


class StreamConsumer(Generic[T]):
    """One consumer group on one stream: reads, parses, hands batches to a use case, acks."""

    def __init__(
        self,
        *,
        service: str,
        stream: str,
        group: str,
        adapter: TypeAdapter[T],
        handle: Handler[T],
        redis: Callable[[], aioredis.Redis],
        settings: CommonSettings,
        metrics: ServiceMetrics,
        batch: int | None = None,
        readers: int = 1,
        linger_ms: int = 0,
    ) -> None:
        self.service = service
        self.readers = readers
        self.linger_ms = linger_ms
        self.stream_name = stream
        self.stream = settings.stream(stream)
        self.dead_stream = settings.stream("dead")
        self.group = group
        self.adapter = adapter
        self.handle = handle
        self._redis = redis
        self.settings = settings
        self.metrics = metrics
        self.batch = batch or settings.consumer_batch
        self.consumer = consumer_name(settings, service)
        self._backoff = 0.0

    async def ensure_group(self) -> None:
        """Create the group at the stream's start, so events published before any
        consumer existed are read too (FastStream would create it at ``$``)."""
        try:
            await self._redis().xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def register(self, broker: RedisBroker) -> None:
        """Attach the normal and the claiming reader to ``broker``.

        Call :meth:`ensure_group` before the broker starts."""
        names = [self.consumer if i == 0 else f"{self.consumer}-{i}" for i in range(self.readers)]
        readers = [
            broker.subscriber(
                stream=StreamSub(
                    self.stream,
                    group=self.group,
                    consumer=names[i],
                    batch=True,
                    max_records=self.batch,
                    polling_interval=self.settings.consumer_block_ms,
                ),
                ack_policy=AckPolicy.MANUAL,
                parser=_raw_batch,
                decoder=_no_body,
                title=f"{self.service}:{self.stream_name}" + (f":{i}" if i else ""),
            )
            for i in range(self.readers)
        ]
        claimer = broker.subscriber(
            stream=StreamSub(
                self.stream,
                group=self.group,
                consumer=self.consumer,
                min_idle_time=self.settings.claim_idle_ms,
                polling_interval=max(self.settings.consumer_block_ms, 500),
            ),
            ack_policy=AckPolicy.MANUAL,
            title=f"{self.service}:{self.stream_name}:reclaim",
        )

        def batch_handler(name: str) -> Callable[..., Awaitable[None]]:
            async def on_batch(body: Any, msg: StreamMessage[Any] = _MESSAGE) -> None:
                raw = msg.raw_message
                ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw["message_ids"]]
                entries = list(zip(ids, raw["data"], strict=True))
                if self.linger_ms and len(entries) < self.batch:
                    entries += await self._linger(name, self.batch - len(entries))
                await self.process(entries, attempts=None, owner=name)

            return on_batch

        for reader, name in zip(readers, names, strict=True):
            reader(batch_handler(name))

        @claimer
        async def on_claimed(body: Any, msg: RedisStreamMessage) -> None:
            raw = msg.raw_message
            ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw["message_ids"]]
            counts = raw.get("delivery_counts")
            if counts:
                attempts = int(counts[0])
            else:
                attempts = await msg.get_delivery_count()
            self.metrics.reclaimed.labels(self.stream_name).inc(len(ids))
            await self.process([(ids[0], raw["data"])], attempts=attempts, owner=self.consumer)

    async def process(
        self,
        entries: list[tuple[str, dict[bytes, bytes]]],
        *,
        attempts: int | None,
        owner: str | None = None,
    ) -> None:
        """Parse, dead-letter the unparseable, hand the rest to the use case, ack what is done."""
        started = time.perf_counter()
        good: list[Delivery[T]] = []
        done: list[str] = []
        for entry_id, fields in entries:
            payload = fields.get(EVENT_FIELD)
            try:
                if payload is None:
                    raise InvalidEvent(f"entry has no '{EVENT_FIELD.decode()}' field")
                good.append(Delivery(entry_id, self.adapter.validate_json(payload)))
            except (ValidationError, InvalidEvent, ValueError) as exc:
                await self.dead_letter(entry_id, fields, _describe(exc), attempts or 1)
                done.append(entry_id)
        if good:
            keeper = (
                asyncio.create_task(self._keep_claimed(owner, [d.entry_id for d in good]))
                if owner is not None
                else None
            )
            try:
                try:
                    rejected = await self.handle(good) or {}
                finally:
                    if keeper is not None:
                        keeper.cancel()
                await self._reject(good, rejected, attempts)
                done.extend(d.entry_id for d in good)
                self.metrics.events.labels(self.stream_name, "ok").inc(len(good) - len(rejected))
            except Exception as exc:  # noqa: BLE001 - every failure is counted and retried
                if _is_infrastructure(exc):
                    # PostgreSQL or Redis is away: leave the batch pending, slow down.
                    self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
                    log.warning("%s: infrastructure error, retrying later: %s", self.stream, exc)
                    self.metrics.events.labels(self.stream_name, "retry").inc(len(good))
                    await self._ack(done)
                    await asyncio.sleep(self._backoff)
                    return
                done.extend(await self._one_by_one(good, attempts, exc))
        self._backoff = 0.0
        await self._ack(done)
        self.metrics.handler_seconds.labels(self.stream_name).observe(time.perf_counter() - started)

    async def _keep_claimed(self, owner: str, ids: list[str]) -> None:
        """While ``owner`` works on ``ids``, reset their idle time (XCLAIM to the same
        consumer, JUSTID: the delivery count stays) every third of ``claim_idle_ms``.

        Without it an embedder batch of a few thousand texts on a CPU (longer than
        the window) was reclaimed and embedded a second time beside the first,
        each half as fast (LoCoMo through ``make run``: 14 reclaims, 172 s)."""
        period = self.settings.claim_idle_ms / 3000
        while True:
            await asyncio.sleep(period)
            try:
                await self._redis().xclaim(
                    self.stream, self.group, owner, 0, list[Any](ids), justid=True
                )
            except Exception as exc:  # noqa: BLE001 - the batch goes on; a reclaim is the cost
                log.warning(
                    "%s: could not extend the claim on %d entries: %s", self.stream, len(ids), exc
                )

    async def _one_by_one(
        self, good: list[Delivery[T]], attempts: int | None, batch_error: Exception
    ) -> list[str]:
        """Retry each entry alone; return the ids that are finished (stored or dead)."""
        finished: list[str] = []
        if len(good) > 1:
            log.info(
                "%s: batch of %d failed (%s); retrying one by one",
                self.stream,
                len(good),
                batch_error,
            )
        for delivery in good:
            try:
                if len(good) > 1:
                    rejected = await self.handle([delivery]) or {}
                else:
                    raise batch_error
                await self._reject([delivery], rejected, attempts)
                finished.append(delivery.entry_id)
                if not rejected:
                    self.metrics.events.labels(self.stream_name, "ok").inc()
            except Exception as exc:  # noqa: BLE001
                n = attempts or 1
                if n >= self.settings.max_attempts:
                    payload = encode(delivery.event) if isinstance(delivery.event, Event) else b""
                    await self.dead_letter(
                        delivery.entry_id, {EVENT_FIELD: payload}, _describe(exc), n
                    )
                    finished.append(delivery.entry_id)
                else:
                    log.warning(
                        "%s %s: attempt %d failed: %s", self.stream, delivery.entry_id, n, exc
                    )
                    self.metrics.events.labels(self.stream_name, "retry").inc()
        return finished

    async def _reject(
        self, deliveries: Sequence[Delivery[T]], rejected: Rejections, attempts: int | None
    ) -> None:
        for d in deliveries:
            reason = rejected.get(d.entry_id)
            if reason is not None:
                payload = encode(d.event) if isinstance(d.event, Event) else b""
                await self.dead_letter(d.entry_id, {EVENT_FIELD: payload}, reason, attempts or 1)

    async def dead_letter(
        self, entry_id: str, fields: dict[bytes, bytes], error: str, attempts: int
    ) -> None:
        payload = fields.get(EVENT_FIELD)
        if payload is None:
            payload = repr({k: v for k, v in fields.items()}).encode()
        await self._redis().xadd(
            self.dead_stream,
            {
                b"stream": self.stream.encode(),
                b"group": self.group.encode(),
                b"entry_id": entry_id.encode(),
                b"payload": payload,
                b"error": error.encode()[:4000],
                b"attempts": str(attempts).encode(),
                b"at": datetime.now(UTC).isoformat().encode(),
            },
            maxlen=self.settings.stream_maxlen,
            approximate=True,
        )
        self.metrics.events.labels(self.stream_name, "dead").inc()
        self.metrics.dead_lettered.labels(self.stream_name).inc()
        log.warning(
            "%s %s dead-lettered after %d attempt(s): %s",
            self.stream,
            entry_id,
            attempts,
            error[:300],
        )

    async def _linger(self, consumer: str, wanted: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """Read more entries for up to ``linger_ms`` so a small batch can fill up to
        ``batch`` (the embedder gathers texts this way before one provider call).
        They are pending under ``consumer`` like the rest, and acked with them."""
        got: list[tuple[str, dict[bytes, bytes]]] = []
        deadline = time.monotonic() + self.linger_ms / 1000
        while len(got) < wanted:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms < 1:
                break
            reply = await self._redis().xreadgroup(
                self.group,
                consumer,
                {self.stream: ">"},
                count=wanted - len(got),
                block=left_ms,
            )
            stream_items: list[Any] = list(reply or [])
            for _, items in stream_items:
                for entry_id, fields in items:
                    eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    got.append((eid, fields))
        return got

    async def _ack(self, ids: list[str]) -> None:
        if ids:
            await self._redis().xack(self.stream, self.group, *ids)

    async def observe(self) -> None:
        """Refresh lag and pending gauges from XINFO GROUPS."""
        try:
            groups = await self._redis().xinfo_groups(self.stream)
        except aioredis.ResponseError:
            return
        for g in groups:
            name = g.get("name")
            name = name.decode() if isinstance(name, bytes) else name
            if name != self.group:
                continue
            self.metrics.pending.labels(self.stream_name).set(int(g.get("pending") or 0))
            lag = g.get("lag")
            if lag is not None:
                self.metrics.lag.labels(self.stream_name).set(int(lag))


async def _raw_batch(msg: Any) -> StreamMessage[Any]:
    """Hand the batch over untouched: we parse each entry ourselves, once.

    FastStream's default batch parser JSON-decodes and re-encodes every entry,
    which costs more than storing it."""
    return StreamMessage(raw_message=msg, body=b"")


async def _no_body(msg: StreamMessage[Any]) -> bytes:
    return b""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:10]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "(event)"
            parts.append(f"{loc}: {err.get('msg')}")
        return "invalid event: " + "; ".join(parts)
    return f"{type(exc).__name__}: {exc}"
