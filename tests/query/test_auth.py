import pytest

from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key, lookup_key, revoke_key
from shared.errors import InvalidRequest
from tests.support import running


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
