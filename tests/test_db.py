"""The pool: a connection goes back without an open transaction, and without a reset
round trip (engram keeps no session state on pooled connections)."""

from __future__ import annotations

from shared.db import create_pool
from tests.conftest import Infra


async def test_a_released_connection_is_rolled_back_but_not_reset(infra: Infra) -> None:
    pool = await create_pool(infra.database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            backend = await conn.fetchval("SELECT pg_backend_pid()")
            await conn.execute("SET application_name = 'left behind'")
            await conn.execute("BEGIN")
            await conn.execute("CREATE TEMP TABLE t (x int)")  # rolled back with the BEGIN
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == backend  # the same one
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT to_regclass('pg_temp.t')") is None
            # asyncpg's default reset (RESET ALL and three more) would have cleared this
            assert await conn.fetchval("SHOW application_name") == "left behind"
    finally:
        await pool.close()
