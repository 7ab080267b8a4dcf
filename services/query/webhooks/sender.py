"""The webhook sender: delivers the outbox at least once (docs/webhooks.md).

Each round claims due deliveries with a lease (``FOR UPDATE SKIP LOCKED``, so several
query processes share the work and a delivery is never sent by two at once), sends
each through the one outbound guard (``shared.outbound.PinnedTransport``: a URL that
resolves to a refused address is never called, whatever it resolved to when it was
subscribed), and records the outcome: delivered on a 2xx; else due again after an
exponential backoff, and dead after ``webhook_max_attempts`` (replayable). A process
killed mid-delivery leaves its lease to expire: the delivery is sent again (at least
once; receivers deduplicate by the event id).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.query.settings import QuerySettings
from shared.embeddings.crypto import decrypt
from shared.outbound import EndpointRefused, PinnedTransport

log = logging.getLogger(__name__)

BATCH = 32
ROUNDS = 20  # rounds back to back while deliveries stay due, before the next poll
OUTCOMES = ("delivered", "retry", "dead")
SIGNATURE_HEADER = "X-Engram-Signature"

CLAIM = """
WITH due AS (
    SELECT subscription_id, event_id FROM webhook_deliveries
    WHERE status = 'pending' AND next_attempt_at <= clock_timestamp()
    ORDER BY next_attempt_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, next_attempt_at = clock_timestamp() + make_interval(secs => $2)
FROM due, webhook_events e, webhook_subscriptions s
WHERE d.subscription_id = due.subscription_id AND d.event_id = due.event_id
  AND e.id = d.event_id AND s.id = d.subscription_id
RETURNING d.subscription_id, d.event_id, d.attempts, d.user_id, e.type, e.payload,
          e.created_at, s.url, s.secret_enc
"""

DELIVERED = """
UPDATE webhook_deliveries SET status = 'delivered', delivered_at = clock_timestamp(),
       last_status = $3, last_error = NULL
WHERE subscription_id = $1 AND event_id = $2
"""

FAILED = """
UPDATE webhook_deliveries
SET status = CASE WHEN $5 THEN 'dead' ELSE 'pending' END,
    next_attempt_at = clock_timestamp() + make_interval(secs => $6),
    last_status = $3, last_error = $4
WHERE subscription_id = $1 AND event_id = $2
"""

BACKLOG = """
SELECT count(*) FILTER (WHERE d.status = 'pending') AS pending,
       count(*) FILTER (WHERE d.status = 'dead') AS dead,
       coalesce(extract(epoch FROM clock_timestamp()
                        - min(e.created_at) FILTER (WHERE d.status = 'pending')), 0) AS oldest
FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
WHERE d.status <> 'delivered'
"""

# Events whose every delivery is done, past the retention: gone (deliveries cascade).
PRUNE = """
DELETE FROM webhook_events e
WHERE e.created_at < clock_timestamp() - make_interval(days => $1)
  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                  WHERE d.event_id = e.id AND d.status = 'pending')
"""


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the secret>``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def body_of(event_id: uuid.UUID, kind: str, user_id: str, created: Any, data: Any) -> bytes:
    payload = {
        "id": str(event_id),
        "type": kind,
        "created_at": created.isoformat(),
        "user_id": user_id,
        "data": data,
    }
    return json.dumps(payload, separators=(",", ":"), default=str).encode()


class Sender:
    def __init__(
        self,
        settings: QuerySettings,
        registry: CollectorRegistry,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.client = httpx.AsyncClient(
            transport=transport or PinnedTransport(settings.webhook_endpoint_allow),
            timeout=settings.webhook_timeout_s,
            follow_redirects=False,
        )
        self.sent = Counter(
            "engram_webhook_deliveries_total",
            "Webhook delivery attempts, by outcome (delivered, retry, dead)",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:  # every series starts at 0, so increase() sees the first
            self.sent.labels(outcome)
        self.latency = Histogram(
            "engram_webhook_latency_seconds",
            "From the change's commit to its delivery's 2xx",
            registry=registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
        )
        self.backlog = Gauge(
            "engram_webhook_backlog", "Webhook deliveries, by state", ["state"], registry=registry
        )
        self.oldest = Gauge(
            "engram_webhook_oldest_pending_seconds",
            "Age of the oldest webhook event not yet delivered",
            registry=registry,
        )
        self._secrets: dict[uuid.UUID, str] = {}
        self._observed = 0.0

    async def close(self) -> None:
        await self.client.aclose()

    async def run(self, pool: asyncpg.Pool) -> int:
        """Deliver what is due, round after round while rounds come back full."""
        total = 0
        for _ in range(ROUNDS):
            n = await self.round(pool)
            total += n
            if n < BATCH:
                break
        if time.monotonic() - self._observed > 5:
            await self.observe(pool)
        return total

    async def round(self, pool: asyncpg.Pool) -> int:
        lease = self.settings.webhook_timeout_s * 2 + 1  # then a lost sender's claim expires
        claimed = await pool.fetch(CLAIM, BATCH, lease)
        if claimed:
            await asyncio.gather(*(self._deliver(pool, r) for r in claimed))
        return len(claimed)

    async def observe(self, pool: asyncpg.Pool) -> None:
        self._observed = time.monotonic()
        r = await pool.fetchrow(BACKLOG)
        assert r is not None
        self.backlog.labels("pending").set(r["pending"])
        self.backlog.labels("dead").set(r["dead"])
        self.oldest.set(float(r["oldest"]))

    async def prune(self, pool: asyncpg.Pool) -> None:
        await pool.execute(PRUNE, self.settings.webhook_retention_days)

    def _secret(self, sub: uuid.UUID, token: bytes) -> str:
        if sub not in self._secrets:
            self._secrets[sub] = decrypt(self.settings, token)
        return self._secrets[sub]

    async def _deliver(self, pool: asyncpg.Pool, r: asyncpg.Record) -> None:
        body = body_of(r["event_id"], r["type"], r["user_id"], r["created_at"], r["payload"])
        now = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "engram-webhooks/1",
            "X-Engram-Event-Id": str(r["event_id"]),
            "X-Engram-Event-Type": r["type"],
            SIGNATURE_HEADER: signature(
                self._secret(r["subscription_id"], r["secret_enc"]), now, body
            ),
        }
        status: int | None = None
        try:
            response = await self.client.post(r["url"], content=body, headers=headers)
            status = response.status_code
            await response.aclose()
            error = None if 200 <= status < 300 else f"HTTP {status}"
        except EndpointRefused as exc:
            error = f"refused: {exc}"
        except httpx.HTTPError as exc:
            error = type(exc).__name__  # never the remote body
        keys: Sequence[Any] = (r["subscription_id"], r["event_id"])
        if error is None:
            await pool.execute(DELIVERED, *keys, status)
            self.sent.labels("delivered").inc()
            self.latency.observe(max(time.time() - r["created_at"].timestamp(), 0.0))
            return
        dead = r["attempts"] >= self.settings.webhook_max_attempts
        await pool.execute(FAILED, *keys, status, error, dead, self.backoff(r["attempts"]))
        self.sent.labels("dead" if dead else "retry").inc()
        log.info(
            "webhook %s to subscription %s: %s (attempt %d%s)",
            r["event_id"], r["subscription_id"], error, r["attempts"], ", dead" if dead else "",
        )  # fmt: skip

    def backoff(self, attempts: int) -> float:
        s = self.settings
        delay = min(s.webhook_backoff_s * 2 ** max(attempts - 1, 0), s.webhook_backoff_max_s)
        return float(delay * random.uniform(0.8, 1.2))  # spreading retries, not secrecy
