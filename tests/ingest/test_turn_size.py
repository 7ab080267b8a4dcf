"""A turn over the size limit is dead-lettered with the reason; the turns around it land."""

from __future__ import annotations

import json

from services.ingest.app import create_app
from services.ingest.settings import IngestSettings
from shared.events import MAX_TURN_CHARS, encode
from shared.streams import EVENT_FIELD
from tests.ingest.helpers import dead_entries, message_count, turn
from tests.support import running, wait_for


async def test_an_oversized_turn_is_dead_lettered_with_the_reason(
    make_settings, pool, redis, user_id
):
    settings = make_settings(IngestSettings)
    key = settings.stream("turns")
    huge = json.loads(encode(turn(user_id, 1)))
    huge["content"] = "w" * (MAX_TURN_CHARS + 1)
    async with running(create_app(settings)):
        await redis.xadd(key, {EVENT_FIELD: encode(turn(user_id, 0))})
        await redis.xadd(key, {EVENT_FIELD: json.dumps(huge)})
        await redis.xadd(key, {EVENT_FIELD: encode(turn(user_id, 2))})
        await wait_for(lambda: _count(pool, user_id, 2), message="the two good turns")
        [dead] = await wait_for(lambda: dead_entries(redis, settings), message="a dead letter")
    assert dead["error"] == (
        f"invalid event: content: String should have at most {MAX_TURN_CHARS} characters"
    )
    assert await message_count(pool, user_id) == 2


async def _count(pool, user_id, n):
    return await message_count(pool, user_id) == n
