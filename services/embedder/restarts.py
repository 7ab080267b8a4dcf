"""Noticing that Redis came back: a restart (a new ``run_id``) or an outage the sweep
itself ran into. Either may have lost embed requests: one published while Redis was
away fails after its rows committed (``Publisher.publish_soon`` logs it), and a
killed Redis loses up to a second of its append-only file. Their rows wait, pending,
with no request; the orphan sweep finds such rows only once they are
``embed_orphan_after_s`` old (10 minutes by default), so after Redis comes back the
embedder looks at once for rows pending longer than :data:`AFTER_RESTART_S`
(issue 29.12: a request lost on a Redis restart was found 11 minutes later)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

AFTER_RESTART_S = 5.0
"""Rows pending at least this long when Redis comes back are swept at once (one whose
request is still on the stream is embedded once more by it, which changes nothing)."""


class RedisRestarts:
    """Call :meth:`came_back` on every sweep: True once after Redis restarted or was
    unreachable (False while it is)."""

    def __init__(self) -> None:
        self._run_id: str | None = None
        self._away = False

    async def came_back(self, redis: aioredis.Redis | RedisCluster) -> bool:
        try:
            info: dict[str, Any] = await redis.info("server")
        except (aioredis.RedisError, OSError):
            self._away = True  # the sweep goes on (its retries need PostgreSQL only)
            return False
        if "run_id" in info:
            run_id = str(info["run_id"])
        else:  # a cluster answers per node: any node restarted counts
            run_id = ",".join(sorted(str(v.get("run_id")) for v in info.values()))
        back = self._away or (self._run_id is not None and run_id != self._run_id)
        self._run_id, self._away = run_id, False
        return back
