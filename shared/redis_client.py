"""The one way a process opens Redis: a single server, or a Redis Cluster.

``ENGRAM_REDIS_CLUSTER=true`` makes ``ENGRAM_REDIS_URL`` a node of a cluster: redis-py's
``RedisCluster`` finds the others, routes each command by its key's slot, follows
MOVED/ASK and refreshes the slot map after a failover. engram only ever sends
single-key commands (or a Lua script over one key), so it needs nothing else of a
cluster; the FastStream broker of a service is its ``RedisClusterBroker`` then.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from faststream.redis import RedisBroker, RedisClusterBroker
from redis.asyncio.cluster import RedisCluster

from shared.settings import CommonSettings

RedisClient = aioredis.Redis | RedisCluster
"""What :func:`connect_redis` returns; both speak every command engram sends."""


def connect_redis(settings: CommonSettings) -> RedisClient:
    """A client for ``settings``' Redis (a cluster when ``redis_cluster``); nothing is
    sent until the first command."""
    url = settings.require_redis_url()
    if settings.redis_cluster:
        return RedisCluster.from_url(url)
    return aioredis.from_url(url)


def make_broker(settings: CommonSettings, *, logger: logging.Logger) -> RedisBroker:
    """The FastStream broker the consumers of a process read through; its per-message
    chatter goes to ``logger`` at DEBUG."""
    url = settings.require_redis_url()
    if settings.redis_cluster:
        return RedisClusterBroker(url, logger=logger, log_level=logging.DEBUG)
    return RedisBroker(url, logger=logger, log_level=logging.DEBUG)
