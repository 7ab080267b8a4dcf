"""Redis Streams plumbing shared by every consumer.

Contract of a stream entry: one field, ``event``, holding an event's JSON
(see ``shared.events``). Delivery is at-least-once:

- a normal FastStream reader (consumer group, batched XREADGROUP) hands a batch
  of events to the use case, which knows nothing of entry ids and answers by
  position (:class:`~shared.events.BatchResult`); entries are acknowledged only
  after the use case returns, i.e. after its database transaction committed;
- a reclaim loop (XAUTOCLAIM after ``claim_idle_ms``, ``reclaim_batch`` entries at
  a time, with their delivery counts) takes over entries a dead or stuck consumer
  left pending; a consumer still working on a batch resets its entries' idle time
  every third of that window, so a slow batch is never taken over and run twice
  beside itself; consumers idle for ``consumer_forget_ms`` with nothing pending
  are removed from the group;
- an entry that cannot be parsed goes to the ``dead`` stream at once and is
  acknowledged at once (a slow batch never dead-letters it twice);
- a failure is handled by the consumer's :class:`FailurePolicy` (declared where
  the consumer is wired): an **outage** (a server unreachable, a timeout, a 429 or
  503 after the provider client's retries) leaves the batch pending and waits
  with backoff, shown on ``engram_consumer_outage``, never dead-lettered; a
  **data** error (PostgreSQL refuses the entry: NUL byte, out-of-range value) is
  isolated by bisecting the batch, O(log n) transactions per bad entry, and
  dead-lettered at once; a **refusal** (a 401, invalid model output, anything
  else) is isolated the same way and dead-lettered with its reason once the
  entry has been delivered ``max_attempts`` times;
- streams are never capped at XADD: entries every group has acknowledged are
  trimmed once a stream is longer than ``stream_maxlen``; unread entries are
  never trimmed (``engram_stream_over_cap`` alarms instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import asyncpg
import redis.asyncio as aioredis
from faststream import AckPolicy, Context
from faststream.message import StreamMessage
from faststream.redis import RedisBroker, StreamSub
from pydantic import TypeAdapter, ValidationError
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterDownError, RedisClusterException, TryAgainError

from shared.erasure import erased_among, owner_of
from shared.errors import EngramError, InfrastructureError, InvalidEvent
from shared.events import BatchResult, Event, encode
from shared.metrics import ServiceMetrics
from shared.redis_client import RedisClient
from shared.settings import CommonSettings
from shared.stream_registry import DEAD, spec
from shared.tracing import OFF, Tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger(__name__)

EVENT_FIELD = b"event"
_MESSAGE = Context("message")
T = TypeVar("T")


@dataclass(frozen=True)
class Delivery(Generic[T]):
    """One parsed stream entry: its id (the adapter's business) and its event (the
    use case's)."""

    entry_id: str
    event: T


Rejections = dict[str, str]
"""Entry ids refused for good, with the reason; they are dead-lettered at once."""

Handler = Callable[[Sequence[T]], Awaitable[BatchResult | None]]
"""A consumer use case: takes the batch's events, returns what it refused or
dropped by position (:class:`~shared.events.BatchResult`), or None when it
handled them all."""


def consumer_name(settings: CommonSettings, service: str) -> str:
    return settings.consumer_name or f"{service}-{socket.gethostname()}-{os.getpid()}"


class Publisher:
    """Appends events to streams; one pipeline round trip per call.

    With tracing on (``tracing``, else as ``settings`` say), each event goes out with a
    ``send <stream>`` span of its own and carries its context (``shared/tracing.py``)."""

    def __init__(
        self, redis: RedisClient, settings: CommonSettings, tracing: Tracing | None = None
    ) -> None:
        self._redis = redis
        self._settings = settings
        self._tracing = (
            tracing if tracing is not None else Tracing.from_settings(settings, "publisher")
        )
        self._soon: set[asyncio.Task[None]] = set()
        self._node_clients: dict[str, aioredis.Redis] = {}

    def publish_soon(self, batches: Sequence[tuple[str, Sequence[Event]]]) -> None:
        """:meth:`publish_many` without waiting for it, for a caller whose rows are
        already safe (committed, ``pending``) and who answers first: the add ack. What
        fails is logged; the rows stay pending and the embedder's sweep takes them
        (``embed_orphan_after_s``). :meth:`flush` waits for what is still on its way."""
        if not any(events for _, events in batches):
            return
        task = asyncio.get_running_loop().create_task(self._publish_logged(batches))
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    async def _publish_logged(self, batches: Sequence[tuple[str, Sequence[Event]]]) -> None:
        try:
            await self.publish_many(batches)
        except InfrastructureError as exc:
            n = sum(len(events) for _, events in batches)
            log.warning("%d event(s) published after the answer were not: %s", n, exc)

    async def flush(self, timeout_s: float = 10.0) -> None:
        """Wait up to ``timeout_s`` for every :meth:`publish_soon` still on its way."""
        if self._soon:
            await asyncio.wait(list(self._soon), timeout=timeout_s)

    async def publish(self, stream: str, events: Sequence[Event]) -> list[str]:
        """XADD each event to ``stream`` (a registered stream such as ``TURNS``, or its
        name), on the shard its chat or user picks; return entry ids."""
        return await self.publish_many([(stream, events)])

    async def publish_many(self, batches: Sequence[tuple[str, Sequence[Event]]]) -> list[str]:
        """XADD events to several streams in one pipeline round trip; return entry ids."""
        n = self._settings.stream_shards
        entries: list[tuple[str, bytes]] = []
        spans: list[Span] = []
        for stream, events in batches:
            s = spec(stream)
            keys = s.keys(self._settings)
            if self._tracing.enabled:
                events, made = self._tracing.producing(s.name, events)
                spans += made
            for event in events:
                entries.append((keys[s.shard_of(event, n)], encode(event)))
        if not spans:
            return await self._xadd(entries)
        return await self._xadd_traced(entries, spans)

    async def publish_raw(self, stream: str, payloads: Sequence[bytes]) -> list[str]:
        """XADD already-encoded JSON payloads (``engram publish``, dead-letter replay),
        each on the shard its own fields pick."""
        s = spec(stream)
        n = self._settings.stream_shards
        keys = s.keys(self._settings)
        if self._tracing.enabled:
            payloads, spans = self._tracing.producing_raw(s.name, payloads)
            entries = [(keys[s.shard_of_payload(p, n)], p) for p in payloads]
            return await self._xadd_traced(entries, spans)
        return await self._xadd([(keys[s.shard_of_payload(p, n)], p) for p in payloads])

    async def _xadd_traced(
        self, entries: Sequence[tuple[str, bytes]], spans: list[Span]
    ) -> list[str]:
        """:meth:`_xadd`, ending each event's ``send`` span with its entry id (or the failure)."""
        try:
            ids = await self._xadd(entries)
        except BaseException as exc:
            self._tracing.failed(spans, exc)
            raise
        self._tracing.sent(spans, ids)
        return ids

    async def _xadd(self, entries: Sequence[tuple[str, bytes]]) -> list[str]:
        """One pipeline of XADDs (no MAXLEN: only what every group acknowledged is ever
        trimmed, :meth:`StreamConsumer.observe`); with ``stream_wait_replicas``, each
        server's XADDs are followed by a WAIT on the connection that sent them."""
        if not entries:
            return []
        keys = sorted({key for key, _ in entries})
        try:
            if self._settings.stream_wait_replicas and isinstance(self._redis, RedisCluster):
                return await self._xadd_waited_on_cluster(self._redis, entries)
            pipe = self._redis.pipeline(transaction=False)
            for key, payload in entries:
                pipe.xadd(key, {EVENT_FIELD: payload})
            if self._settings.stream_wait_replicas:
                pipe.execute_command(
                    "WAIT",
                    self._settings.stream_wait_replicas,
                    self._settings.stream_wait_timeout_ms,
                )
            replies = await pipe.execute()
        except REDIS_UNAVAILABLE as exc:
            raise InfrastructureError(f"cannot publish to {', '.join(keys)}: {exc}") from exc
        if self._settings.stream_wait_replicas:
            self._check_waited(keys, int(replies.pop()))
        return [_id(i) for i in replies]

    async def _xadd_waited_on_cluster(
        self, cluster: RedisCluster, entries: Sequence[tuple[str, bytes]]
    ) -> list[str]:
        """XADDs then WAIT per master, each on one connection of its own (WAIT counts the
        replicas that hold what *its* connection wrote, so it cannot ride a cluster
        pipeline, which re-sends a command elsewhere on a redirect or a failover). A
        master that no longer serves a key answers MOVED: the slot map is read again
        and the publish fails, to be retried."""
        await cluster.initialize()
        by_node: dict[str, list[int]] = {}
        nodes: dict[str, Any] = {}
        for i, (key, _) in enumerate(entries):
            node = cluster.get_node_from_key(key)
            if node is None:
                raise InfrastructureError(f"no master serves {key}")
            nodes[node.name] = node
            by_node.setdefault(node.name, []).append(i)
        ids: list[str] = [""] * len(entries)

        async def on(name: str) -> None:
            client = self._node_clients.get(name)
            if client is None:
                node = nodes[name]
                kwargs = cluster.get_connection_kwargs()
                client = aioredis.Redis(
                    host=node.host,
                    port=node.port,
                    username=kwargs.get("username"),
                    password=kwargs.get("password"),
                )
                self._node_clients[name] = client
            pipe = client.pipeline(transaction=False)
            for i in by_node[name]:
                pipe.xadd(entries[i][0], {EVENT_FIELD: entries[i][1]})
            pipe.execute_command(
                "WAIT", self._settings.stream_wait_replicas, self._settings.stream_wait_timeout_ms
            )
            try:
                replies = await pipe.execute()
            except REDIS_UNAVAILABLE:
                # the master is gone (a connection error) or no longer serves the slot
                # (MOVED): read the slot map again for the retry, which may fail while
                # the failover is still under way
                self._node_clients.pop(name, None)
                await client.aclose()
                with contextlib.suppress(*REDIS_UNAVAILABLE):
                    await cluster.nodes_manager.initialize()
                raise
            self._check_waited([entries[i][0] for i in by_node[name]], int(replies.pop()))
            for i, entry_id in zip(by_node[name], replies, strict=True):
                ids[i] = _id(entry_id)

        await asyncio.gather(*(on(name) for name in by_node))
        return ids

    def _check_waited(self, keys: Sequence[str], replicas: int) -> None:
        want = self._settings.stream_wait_replicas
        if replicas < want:
            raise InfrastructureError(
                f"published to {', '.join(sorted(set(keys)))}, but only {replicas} of {want} "
                f"replica(s) hold it after {self._settings.stream_wait_timeout_ms} ms "
                "(ENGRAM_STREAM_WAIT_REPLICAS): a failover now could lose it; publish "
                "again (consumers drop repeats)"
            )

    async def aclose(self) -> None:
        """Close the per-master connections a waited publish on a cluster opened."""
        for client in self._node_clients.values():
            await client.aclose()
        self._node_clients.clear()


REDIS_UNAVAILABLE: tuple[type[BaseException], ...] = (
    aioredis.RedisError,  # ClusterDownError, TryAgainError, MasterDownError among them
    RedisClusterException,  # SlotNotCoveredError while a cluster's slot map is redrawn
    OSError,
)
"""What a publish or read can meet while Redis, or a cluster node, is away or failing over."""

Failure = Literal["outage", "data", "refused"]

OUTAGES: tuple[type[BaseException], ...] = (
    OSError,  # refused / reset connections, TimeoutError
    asyncio.TimeoutError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, crash recovery
    asyncpg.exceptions.TransactionRollbackError,  # deadlock, serialization failure
    asyncpg.exceptions.QueryCanceledError,  # statement timeout
    aioredis.ConnectionError,
    aioredis.TimeoutError,
    # a Redis Cluster failing over: no master for a slot yet, or its map being redrawn
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
)
"""Failures that say nothing about the entry: a server is away or busy."""

DATA_ERRORS: tuple[type[BaseException], ...] = (
    InvalidEvent,
    asyncpg.exceptions.DataError,  # 22xxx: NUL byte, value out of range, bad encoding
    asyncpg.exceptions.IntegrityConstraintViolationError,  # 23xxx
    asyncpg.exceptions.ProgramLimitExceededError,  # 54xxx: a value too large to index
    UnicodeError,  # a lone surrogate cannot be sent to PostgreSQL
    OverflowError,  # a date the driver cannot encode
)
"""Failures caused by the entry itself: the same entry fails the same way every time."""


@dataclass(frozen=True)
class FailurePolicy:
    """How a consumer treats a failed batch, by retryability.

    - ``outage``: wait with backoff, entries stay pending, never dead-lettered;
    - ``data``: bisect to the bad entry, dead-letter it at once;
    - ``refused``: bisect to the bad entry, dead-letter it when it has been
      delivered ``max_attempts`` times (it stays pending until then and is
      delivered again after ``claim_idle_ms``).

    An :class:`~shared.errors.EngramError` says itself whether it is retryable
    (``ProviderUnavailable`` yes, ``ProviderError`` for a 401 no); other
    exceptions are matched against ``outages`` then ``data``; anything else is a
    refusal."""

    max_attempts: int
    outages: tuple[type[BaseException], ...] = OUTAGES
    data: tuple[type[BaseException], ...] = DATA_ERRORS

    @classmethod
    def default(cls, settings: CommonSettings, **overrides: Any) -> FailurePolicy:
        return cls(max_attempts=settings.max_attempts, **overrides)

    def classify(self, exc: BaseException) -> Failure:
        if isinstance(exc, self.data):
            return "data"
        if isinstance(exc, EngramError):
            return "outage" if exc.retryable else "refused"
        if isinstance(exc, self.outages):
            return "outage"
        return "refused"


class _Outage(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


# Remove a consumer only if it still has nothing pending and is still idle, in one step:
# between a separate XINFO and DELCONSUMER a live consumer (Redis 7.0's idle time grows
# while it only polls) could read entries, and DELCONSUMER would drop them from the
# group's pending list: delivered, never acknowledged, never delivered again.
FORGET_IF_IDLE = """
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] == ARGV[2] then
    if tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
"""


class StreamConsumer(Generic[T]):
    """One consumer group on one shard of a stream (the stream's one key when it has
    one shard): reads, parses, hands batches to a use case, acks; claims, retries,
    dead-letters and trims that shard. :meth:`Runtime.consume` makes one per shard."""

    def __init__(
        self,
        *,
        service: str,
        stream: str,
        group: str,
        adapter: TypeAdapter[T],
        handle: Handler[T],
        redis: Callable[[], RedisClient],
        settings: CommonSettings,
        metrics: ServiceMetrics,
        batch: int | None = None,
        readers: int = 1,
        linger_ms: int = 0,
        policy: FailurePolicy | None = None,
        pool: Callable[[], asyncpg.Pool] | None = None,
        shard: int = 0,
        tracing: Tracing = OFF,
    ) -> None:
        self.service = service
        self.tracing = tracing
        self._pool = pool
        self.readers = readers
        self.linger_ms = linger_ms
        registered = spec(stream)
        self.stream_name = registered.name
        self.shard = shard
        self.stream = registered.key(settings, shard)
        self.dead_stream = DEAD.key(settings)
        # metric labels: the stream, and its shard when it has more than one
        sharded = registered.shards(settings.stream_shards) > 1
        self.labels = (self.stream_name, str(shard)) if sharded else (self.stream_name,)
        self.group = group
        self.adapter = adapter
        self.handle = handle
        self._redis = redis
        self.settings = settings
        self.metrics = metrics
        self.batch = batch or settings.consumer_batch
        self.policy = policy or FailurePolicy.default(settings)
        self.consumer = consumer_name(settings, service)
        self.names = [
            self.consumer if i == 0 else f"{self.consumer}-{i}" for i in range(self.readers)
        ]
        self._backoff = 0.0
        # Each series exists at 0 from the start, so the first dead letter is an increase
        # a rule can see (deploy/prometheus/alerts.yml, EngramDeadLetters).
        metrics.dead_lettered.labels(*self.labels)

    async def ensure_group(self) -> None:
        """Create the group at the stream's start, so events published before any
        consumer existed are read too (FastStream would create it at ``$``)."""
        try:
            await self._redis().xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except aioredis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def register(self, broker: RedisBroker) -> None:
        """Attach the normal readers to ``broker`` (the reclaim loop is :meth:`reclaim`,
        run periodically by the runtime). Call :meth:`ensure_group` before the broker
        starts."""
        readers = [
            broker.subscriber(
                stream=StreamSub(
                    self.stream,
                    group=self.group,
                    consumer=self.names[i],
                    batch=True,
                    max_records=self.batch,
                    polling_interval=self.settings.consumer_block_ms,
                ),
                ack_policy=AckPolicy.MANUAL,
                parser=_raw_batch,
                decoder=_no_body,
                title=f"{self.service}:{':'.join(self.labels)}" + (f":{i}" if i else ""),
            )
            for i in range(self.readers)
        ]

        def batch_handler(name: str) -> Callable[..., Awaitable[None]]:
            async def on_batch(body: Any, msg: StreamMessage[Any] = _MESSAGE) -> None:
                raw = msg.raw_message
                ids = [i.decode() if isinstance(i, bytes) else str(i) for i in raw["message_ids"]]
                entries = list(zip(ids, raw["data"], strict=True))
                if self.linger_ms and len(entries) < self.batch:
                    entries += await self._linger(name, self.batch - len(entries))
                await self.process(entries, attempts=None, owner=name)

            return on_batch

        for reader, name in zip(readers, self.names, strict=True):
            reader(batch_handler(name))

    @property
    def reclaim_interval_s(self) -> float:
        return max(self.settings.claim_idle_ms / 2000, 0.2)

    async def reclaim(self) -> int:
        """Take over entries pending longer than ``claim_idle_ms`` (a dead or stuck
        consumer's), ``reclaim_batch`` at a time with their delivery counts, and
        handle them as a batch; then forget idle consumers. Returns entries taken."""
        r = self._redis()
        start = "0-0"
        taken = 0
        while True:
            reply = await r.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                self.settings.claim_idle_ms,
                start_id=start,
                count=self.settings.reclaim_batch,
            )
            start = _id(reply[0])
            entries = [(_id(i), f) for i, f in reply[1] if f is not None]
            if entries:
                taken += len(entries)
                self.metrics.reclaimed.labels(*self.labels).inc(len(entries))
                counts = await r.xpending_range(
                    self.stream,
                    self.group,
                    min=entries[0][0],
                    max=entries[-1][0],
                    count=len(entries) * 2,
                    consumername=self.consumer,
                )
                attempts = {_id(c["message_id"]): int(c["times_delivered"]) for c in counts}
                await self.process(entries, attempts=attempts, owner=self.consumer)
            if start == "0-0" or not entries:
                break
        await self.forget_idle_consumers()
        return taken

    async def forget_idle_consumers(self) -> list[str]:
        """Remove consumers of the group idle for ``consumer_forget_ms`` with nothing
        pending (dead processes; a live one polls every ``consumer_block_ms`` and
        would simply be created again on its next read)."""
        r = self._redis()
        removed = []
        try:
            consumers = await r.xinfo_consumers(self.stream, self.group)
        except aioredis.ResponseError:
            return []
        for c in consumers:
            name = _text(c.get("name"))
            if name in self.names or int(c.get("pending") or 0):
                continue
            if int(c.get("idle") or 0) < self.settings.consumer_forget_ms:
                continue
            # DELCONSUMER drops the consumer's pending entries: only ever with none, checked
            # again inside the script with the removal, so a read in between cannot be lost.
            if int(
                await r.eval(
                    FORGET_IF_IDLE,
                    1,
                    self.stream,
                    self.group,
                    name,
                    self.settings.consumer_forget_ms,
                )
            ):
                removed.append(name)
        if removed:
            self.metrics.consumers_removed.labels(*self.labels).inc(len(removed))
            log.info(
                "%s: removed %d idle consumer(s) from %s", self.stream, len(removed), self.group
            )
        return removed

    async def process(
        self,
        entries: list[tuple[str, dict[bytes, bytes]]],
        *,
        attempts: dict[str, int] | None,
        owner: str | None = None,
    ) -> None:
        """Parse, dead-letter the unparseable, hand the rest to the use case, ack what
        is done; failures go by :attr:`policy`. ``attempts`` are the entries' delivery
        counts (None: first delivery)."""
        started = time.perf_counter()
        good: list[Delivery[T]] = []
        unparseable: list[str] = []
        for entry_id, fields in entries:
            payload = fields.get(EVENT_FIELD)
            try:
                if payload is None:
                    raise InvalidEvent(f"entry has no '{EVENT_FIELD.decode()}' field")
                good.append(Delivery(entry_id, self.adapter.validate_json(payload)))
            except (ValidationError, InvalidEvent, ValueError) as exc:
                n = (attempts or {}).get(entry_id, 1)
                await self.dead_letter(entry_id, fields, _describe(exc), n)
                unparseable.append(entry_id)
        # Acknowledged now: a slow batch must not leave them to be reclaimed and
        # dead-lettered a second time.
        await self._ack(unparseable)
        if not good:
            return
        finished = asyncio.Event()
        keeper = (
            asyncio.create_task(self._keep_claimed(owner, [d.entry_id for d in good], finished))
            if owner is not None
            else None
        )
        done: list[str] = []
        try:
            try:
                rejected = await self._run(good)
            except Exception as exc:  # noqa: BLE001 - every failure goes by the policy
                await self._settle(good, exc, attempts or {}, done)
            else:
                await self._reject(good, rejected, attempts)
                done = [d.entry_id for d in good]
                self.metrics.events.labels(*self.labels, "ok").inc(len(good) - len(rejected))
        except _Outage as outage:
            await self._wait_out(outage.cause)
            return
        finally:
            finished.set()
            if keeper is not None:
                keeper.cancel()
            await self._ack(done)
        if self._backoff:
            self._backoff = 0.0
            self.metrics.outage.labels(*self.labels).set(0)
        self.metrics.handler_seconds.labels(*self.labels).observe(time.perf_counter() - started)

    async def _run(self, group: Sequence[Delivery[T]]) -> Rejections:
        """Hand ``group``'s events to the use case and map its answer back to entry
        ids: the refused (to dead-letter, returned) and the dropped (an erased
        user's events, deleted from the stream now, acknowledged with the rest)."""
        events = [d.event for d in group]
        if self.tracing.enabled:
            with self.tracing.consuming(
                events,
                stream=self.stream_name,
                group=self.group,
                entry_ids=[d.entry_id for d in group],
            ) as traced:
                result = await self.handle(events)
                traced(result)
        else:
            result = await self.handle(events)
        if result is None:
            return {}
        if result.dropped:
            await self._redis().xdel(self.stream, *(group[i].entry_id for i in result.dropped))
        return {group[i].entry_id: reason for i, reason in result.refused.items()}

    async def _wait_out(self, exc: BaseException) -> None:
        """An outage: leave the entries pending and slow down (capped backoff)."""
        self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
        self.metrics.outage.labels(*self.labels).set(1)
        self.metrics.failures.labels(*self.labels, "outage").inc()
        log.warning(
            "%s: outage (%s: %s); retrying in %.1f s",
            self.stream,
            type(exc).__name__,
            exc,
            self._backoff,
        )
        await asyncio.sleep(self._backoff)

    async def _settle(
        self,
        group: list[Delivery[T]],
        exc: Exception,
        attempts: dict[str, int],
        finished: list[str],
    ) -> None:
        """``group`` failed with ``exc``: find the entries that cause it by halving
        (O(log n) handlings per bad entry), store the rest; add the finished ids
        (stored or dead-lettered) to ``finished``. Raises :class:`_Outage` when the
        failure is an outage (what is not finished stays pending)."""
        kind = self.policy.classify(exc)
        if kind == "outage":
            raise _Outage(exc)
        if len(group) == 1:
            finished += await self._settle_one(group[0], exc, kind, attempts)
            return
        log.info(
            "%s: batch of %d failed (%s: %s); isolating the entry at fault",
            self.stream,
            len(group),
            type(exc).__name__,
            exc,
        )
        mid = len(group) // 2
        for half in (group[:mid], group[mid:]):
            try:
                rejected = await self._run(half)
            except Exception as sub:  # noqa: BLE001
                await self._settle(half, sub, attempts, finished)
                continue
            await self._reject(half, rejected, attempts)
            finished += [d.entry_id for d in half]
            self.metrics.events.labels(*self.labels, "ok").inc(len(half) - len(rejected))

    async def _settle_one(
        self, delivery: Delivery[T], exc: Exception, kind: Failure, attempts: dict[str, int]
    ) -> list[str]:
        n = attempts.get(delivery.entry_id, 1)
        self.metrics.failures.labels(*self.labels, kind).inc()
        if kind == "data" or n >= self.policy.max_attempts:
            payload = encode(delivery.event) if isinstance(delivery.event, Event) else b""
            reason = _describe(exc)
            if kind == "data":
                reason = f"data refused: {reason}"
            await self.dead_letter(delivery.entry_id, {EVENT_FIELD: payload}, reason, n)
            return [delivery.entry_id]
        log.warning(
            "%s %s: delivery %d of %d refused, left pending: %s",
            self.stream,
            delivery.entry_id,
            n,
            self.policy.max_attempts,
            exc,
        )
        self.metrics.events.labels(*self.labels, "retry").inc()
        return []

    async def _keep_claimed(self, owner: str, ids: list[str], finished: asyncio.Event) -> None:
        """While ``owner`` works on ``ids`` (until ``finished`` is set), reset their idle
        time (XCLAIM to the same consumer, JUSTID: the delivery count stays) every third
        of ``claim_idle_ms``.

        Without it an embedder batch of a few thousand texts on a CPU (longer than
        the window) was reclaimed and embedded a second time beside the first,
        each half as fast (LoCoMo through ``make run``: 14 reclaims, 172 s).

        It ends on ``finished``, not only on cancellation: redis-py (8.1) swallows a
        cancellation that arrives while a command is in flight, and a keeper that
        outlived its batch kept the entries of a batch left pending (an outage, a
        refusal) claimed for good, so no consumer ever took them over (the kill loop:
        a turn never stored, turns never embedded)."""
        period = self.settings.claim_idle_ms / 3000
        while not finished.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), period)
            if finished.is_set():
                return
            try:
                await self._redis().xclaim(
                    self.stream, self.group, owner, 0, list[Any](ids), justid=True
                )
            except Exception as exc:  # noqa: BLE001 - the batch goes on; a reclaim is the cost
                log.warning(
                    "%s: could not extend the claim on %d entries: %s", self.stream, len(ids), exc
                )

    async def _reject(
        self,
        deliveries: Sequence[Delivery[T]],
        rejected: Rejections,
        attempts: dict[str, int] | None,
    ) -> None:
        for d in deliveries:
            reason = rejected.get(d.entry_id)
            if reason is not None:
                payload = encode(d.event) if isinstance(d.event, Event) else b""
                n = (attempts or {}).get(d.entry_id, 1)
                await self.dead_letter(d.entry_id, {EVENT_FIELD: payload}, reason, n)

    async def dead_letter(
        self, entry_id: str, fields: dict[bytes, bytes], error: str, attempts: int
    ) -> None:
        erased = await dead_letter(
            self._redis(),
            self.settings,
            stream=self.stream,
            group=self.group,
            entry_id=entry_id,
            fields=fields,
            error=error,
            attempts=attempts,
            pool=self._pool() if self._pool is not None else None,
        )
        if erased:  # an erased user's entry: its content does not stay on the stream
            await self._redis().xdel(self.stream, entry_id)
        self.metrics.events.labels(*self.labels, "dead").inc()
        self.metrics.dead_lettered.labels(*self.labels).inc()
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
                    got.append((_id(entry_id), fields))
        return got

    async def _ack(self, ids: list[str]) -> None:
        if ids:
            await self._redis().xack(self.stream, self.group, *ids)

    async def observe(self) -> None:
        """Refresh the lag, pending and length gauges, and trim what every group has
        acknowledged once the stream is longer than ``stream_maxlen``."""
        state = await stream_state(self._redis(), self.stream)
        if state is None:
            return
        mine = state.groups.get(self.group)
        if mine is not None:
            self.metrics.pending.labels(*self.labels).set(mine.pending)
            self.metrics.lag.labels(*self.labels).set(mine.lag)
        length = state.length
        if length > self.settings.stream_maxlen and state.groups:
            trimmed = await trim_acknowledged(self._redis(), self.stream, state)
            length -= trimmed
        self.metrics.stream_length.labels(*self.labels).set(length)
        over = length > self.settings.stream_maxlen
        self.metrics.over_cap.labels(*self.labels).set(1 if over else 0)
        if over:
            log.warning(
                "%s holds %d entries, more than ENGRAM_STREAM_MAXLEN=%d, not yet acknowledged "
                "by every group; nothing unread is trimmed",
                self.stream,
                length,
                self.settings.stream_maxlen,
            )


@dataclass(frozen=True)
class ShardConsumers(Generic[T]):
    """One consumer group's readers of a stream, one :class:`StreamConsumer` per shard
    (what :meth:`Runtime.consume` returns)."""

    shards: list[StreamConsumer[T]]

    async def observe(self) -> None:
        for c in self.shards:
            await c.observe()

    async def reclaim(self) -> int:
        return sum([await c.reclaim() for c in self.shards])


@dataclass
class GroupState:
    name: str
    pending: int
    lag: int
    last_delivered: str
    oldest_pending: str | None


@dataclass
class StreamState:
    length: int
    last_generated: str
    groups: dict[str, GroupState] = field(default_factory=dict)


def _id(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


async def stream_state(r: RedisClient, stream: str) -> StreamState | None:
    """Length, last id and each group's pending count, true lag and oldest pending id.

    The lag Redis reports can be missing or stale (after a restart it was 42,297
    with nothing waiting), so it is checked: a group whose last delivered id is the
    stream's last id has lag 0; otherwise the entries after it are counted (up to
    100,000) when Redis cannot say."""
    try:
        info = await r.xinfo_stream(stream)
        groups = await r.xinfo_groups(stream)
    except aioredis.ResponseError:
        return None
    state = StreamState(int(info.get("length") or 0), _id(info.get("last-generated-id") or "0-0"))
    for g in groups:
        name = _text(g.get("name"))
        last = _id(g.get("last-delivered-id") or "0-0")
        pending = int(g.get("pending") or 0)
        oldest = None
        if pending:
            summary = await r.xpending(stream, name)
            oldest = _id(summary["min"]) if summary.get("min") else None
        if _id_key(last) >= _id_key(state.last_generated):
            lag = 0
        else:
            reported = g.get("lag")
            after = await r.xrange(stream, min=f"({last}", max="+", count=1)
            if not after:
                lag = 0
            elif reported is not None and int(reported) > 0:
                lag = int(reported)
            else:
                lag = len(await r.xrange(stream, min=f"({last}", max="+", count=100_000) or [])
        state.groups[name] = GroupState(name, pending, lag, last, oldest)
    return state


async def trim_acknowledged(r: RedisClient, stream: str, state: StreamState) -> int:
    """XTRIM MINID below the oldest entry some group still needs (pending, or not
    yet delivered); returns entries removed. Groups only move forward, so the
    bound read here stays safe while the trim runs."""
    bounds = []
    for g in state.groups.values():
        if g.oldest_pending is not None:
            bounds.append(_id_key(g.oldest_pending))
        ms, seq = _id_key(g.last_delivered)
        bounds.append((ms, seq + 1))
    if not bounds:
        return 0
    ms, seq = min(bounds)
    return int(await r.xtrim(stream, minid=f"{ms}-{seq}", approximate=False))


async def dead_letter(
    r: RedisClient,
    settings: CommonSettings,
    *,
    stream: str,
    group: str,
    entry_id: str,
    fields: dict[bytes, bytes],
    error: str,
    attempts: int,
    pool: asyncpg.Pool | None = None,
) -> bool:
    """Append an entry to the ``dead`` stream with the reason (also used by
    ``engram publish`` for lines it skips). The dead stream has no consumer
    group: it keeps about ``stream_maxlen`` newest entries.

    With ``pool``, an entry whose user was erased is kept without its payload (the
    reason and where it came from stay): erased content is not stored again; True is
    returned then, and the caller deletes the entry from its own stream."""
    payload = fields.get(EVENT_FIELD)
    if payload is None:
        payload = repr({k: v for k, v in fields.items()}).encode()
    erased = False
    if pool is not None:
        owner = owner_of(payload)
        erased = owner is not None and bool(await erased_among(pool, [owner]))
        if erased:
            payload = b""
            error = f"{error} (payload not kept: its user was erased)"
    await r.xadd(
        DEAD.key(settings),
        {
            b"stream": stream.encode(),
            b"group": group.encode(),
            b"entry_id": entry_id.encode(),
            b"payload": payload,
            b"error": error.encode(errors="replace")[:4000],
            b"attempts": str(attempts).encode(),
            b"at": datetime.now(UTC).isoformat().encode(),
        },
        maxlen=settings.stream_maxlen,
        approximate=True,
    )
    return erased


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
