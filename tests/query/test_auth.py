import asyncio

import pytest

from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key, lookup_key, revoke_key
from shared.errors import InvalidRequest
from tests.support import running, wait_for


async def test_keys_scope_calls_to_their_user(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    _, secret = await create_key(pool, user_id=user_id)
    _, admin_secret = await create_key(pool, user_id=None, is_admin=True)
    async with running(app) as client:
        r = await client.get("/v1/me", headers={"Authorization": f"Bearer {secret}"})
        assert r.status_code == 200 and r.json()["user_id"] == user_id
        r = await client.get("/v1/me", headers={"Authorization": f"Bearer {admin_secret}"})
        assert r.json()["admin"] is True


async def test_missing_bad_and_revoked_keys_get_401_with_a_message(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    key, secret = await create_key(pool, user_id=user_id)
    async with running(app) as client:
        r = await client.get("/v1/me")
        assert r.status_code == 401 and "missing API key" in r.json()["detail"]
        r = await client.get("/v1/me", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401 and "unknown" in r.json()["detail"]
        r = await client.get("/v1/me", headers={"Authorization": f"Basic {secret}"})
        assert r.status_code == 401
        await revoke_key(pool, key.prefix)
        r = await client.get("/v1/me", headers={"Authorization": f"Bearer {secret}"})
        assert r.status_code == 401 and "revoked" in r.json()["detail"]


async def test_a_prefix_two_live_keys_share_revokes_none_and_names_them(pool, user_id):
    """Issue 29.14: prefixes are 8 random hex characters, so two keys can share one."""
    first, first_secret = await create_key(pool, user_id=user_id, name="laptop")
    second, second_secret = await create_key(pool, user_id=user_id + "-b", name="ci")
    await pool.execute("UPDATE api_keys SET prefix = $1 WHERE id = $2", first.prefix, second.id)
    with pytest.raises(InvalidRequest) as refused:
        await revoke_key(pool, first.prefix)
    assert "2 live keys" in str(refused.value) and "'laptop'" in str(refused.value)
    assert repr(user_id + "-b") in str(refused.value)
    assert await lookup_key(pool, first_secret) is not None
    assert await lookup_key(pool, second_secret) is not None
    # the whole key names one of them
    assert (await revoke_key(pool, second_secret)).id == second.id
    assert await lookup_key(pool, second_secret) is None
    assert await lookup_key(pool, first_secret) is not None
    assert (await revoke_key(pool, first.prefix)).id == first.id  # alone now


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_a_key_revoked_elsewhere_stops_working_in_every_process_at_once(
    make_settings, pool, user_id
):
    """Two query processes have the key cached (a TTL far beyond the test); the CLI's
    revoke_key, a third party, reaches both through PostgreSQL's NOTIFY."""
    first = create_app(make_settings(QuerySettings, key_cache_ttl_s=600))
    second = create_app(make_settings(QuerySettings, key_cache_ttl_s=600))
    key, secret = await create_key(pool, user_id=user_id)
    async with running(first) as a, running(second) as b:
        for client in (a, b):
            assert (await client.get("/v1/me", headers=_bearer(secret))).status_code == 200
        assert first.state.key_cache.listening and second.state.key_cache.listening
        await revoke_key(pool, key.prefix)

        async def refused() -> bool:
            codes = [(await c.get("/v1/me", headers=_bearer(secret))).status_code for c in (a, b)]
            return codes == [401, 401]

        await wait_for(refused, timeout=2.0, message="the revoked key refused by both")


async def test_the_cache_holds_a_key_for_its_ttl_only_when_nothing_announces_the_change(
    make_settings, pool, user_id
):
    """What PostgreSQL does not announce (a key revoked by hand in SQL) is the TTL's
    bound: cached, the key still answers; with no cache it is refused at once."""
    cached = create_app(make_settings(QuerySettings, key_cache_ttl_s=600))
    uncached = create_app(make_settings(QuerySettings, key_cache_ttl_s=0))
    key, secret = await create_key(pool, user_id=user_id)
    async with running(cached) as a, running(uncached) as b:
        for client in (a, b):
            assert (await client.get("/v1/me", headers=_bearer(secret))).status_code == 200
        await pool.execute("UPDATE api_keys SET revoked_at = now() WHERE id = $1", key.id)
        assert (await a.get("/v1/me", headers=_bearer(secret))).status_code == 200
        assert (await b.get("/v1/me", headers=_bearer(secret))).status_code == 401
        assert not uncached.state.key_cache.listening


async def test_a_process_that_lost_its_listener_caches_nothing_until_it_is_back(
    make_settings, pool, user_id
):
    app = create_app(make_settings(QuerySettings, key_cache_ttl_s=600))
    key, secret = await create_key(pool, user_id=user_id)
    async with running(app) as client:
        assert (await client.get("/v1/me", headers=_bearer(secret))).status_code == 200
        cache = app.state.key_cache
        killed = await pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid = $1",
            cache._listener.get_server_pid(),
        )
        assert killed == 1
        await wait_for(
            lambda: asyncio.sleep(0, not cache.listening), timeout=5, message="listener lost"
        )
        await pool.execute("UPDATE api_keys SET revoked_at = now() WHERE id = $1", key.id)
        assert (await client.get("/v1/me", headers=_bearer(secret))).status_code == 401
        await wait_for(lambda: asyncio.sleep(0, cache.listening), timeout=5, message="back")
        _, other = await create_key(pool, user_id=user_id)
        assert (await client.get("/v1/me", headers=_bearer(other))).status_code == 200
        assert len(cache._keys) == 1  # caching again


async def test_an_erased_users_key_is_refused_at_once_by_the_process_that_erased_it(
    make_settings, pool, user_id
):
    app = create_app(make_settings(QuerySettings, key_cache_ttl_s=600))
    _, secret = await create_key(pool, user_id=user_id)
    async with running(app) as client:
        assert (await client.get("/v1/me", headers=_bearer(secret))).status_code == 200
        r = await client.delete(f"/v1/users/{user_id}", headers=_bearer(secret))
        assert r.status_code == 200, r.text
        assert (await client.get("/v1/me", headers=_bearer(secret))).status_code == 401
