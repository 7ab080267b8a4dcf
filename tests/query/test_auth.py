from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key, revoke_key
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
