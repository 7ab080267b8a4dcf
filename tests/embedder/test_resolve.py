"""Choosing a user's embedder (Nova 3.1.3 precedence) and storing their settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr, ValidationError

from shared.embeddings import (
    EmbeddingSettings,
    ProviderSettingsIn,
    get_provider_settings,
    put_provider_settings,
    resolve_embedder,
)
from shared.embeddings.local import LocalEmbedder
from shared.settings import CommonSettings


@pytest.fixture
def esettings(make_settings: Callable[..., Any]) -> EmbeddingSettings:
    return make_settings(EmbeddingSettings, secret_key=SecretStr("test-secret"))


async def test_default_is_the_local_system_provider(
    pool: asyncpg.Pool, esettings: EmbeddingSettings, user_id: str
) -> None:
    embedder = await resolve_embedder(pool, user_id, esettings)
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.provider, embedder.model, embedder.dimensions) == (
        "local",
        "all-MiniLM-L6-v2-int8",
        384,
    )


async def test_plain_common_settings_get_the_system_default(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    embedder = await resolve_embedder(pool, user_id, make_settings(CommonSettings))
    assert embedder is not None and embedder.provider == "local"


async def test_no_system_provider_and_no_user_endpoint_is_full_text_only(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    s = make_settings(EmbeddingSettings, embedding_provider="none")
    assert await resolve_embedder(pool, user_id, s) is None


async def test_user_endpoint_applies_when_there_is_no_system_provider(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    s = make_settings(EmbeddingSettings, embedding_provider="none", secret_key=SecretStr("k"))
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="openai",
            endpoint_url="http://127.0.0.1:9/v1",
            model="m1",
            api_key=SecretStr("sk-secret"),
            dimensions=128,
        ),
        s,
    )
    embedder = await resolve_embedder(pool, user_id, s)
    assert embedder is not None
    assert (embedder.provider, embedder.model, embedder.dimensions) == ("openai", "m1", 128)
    # the key is encrypted at rest
    stored = await pool.fetchval(
        "SELECT api_key_enc FROM embedding_settings WHERE user_id = $1", user_id
    )
    assert stored and b"sk-secret" not in bytes(stored)
    out = await get_provider_settings(pool, user_id, s)
    assert out.has_api_key and out.effective_source == "user"
    assert "sk-secret" not in out.model_dump_json()


async def test_system_provider_wins_over_user_endpoint_unless_override(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    s = make_settings(EmbeddingSettings, secret_key=SecretStr("k"))
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            provider="ollama",
            endpoint_url="http://127.0.0.1:9",
            model="nomic-embed-text",
        ),
        s,
    )
    assert (await resolve_embedder(pool, user_id, s)).provider == "local"  # type: ignore[union-attr]
    s2 = make_settings(EmbeddingSettings, embedding_user_override=True, secret_key=SecretStr("k"))
    assert (await resolve_embedder(pool, user_id, s2)).provider == "ollama"  # type: ignore[union-attr]


async def test_user_who_turned_embeddings_off_gets_full_text_only(
    pool: asyncpg.Pool, esettings: EmbeddingSettings, user_id: str
) -> None:
    await put_provider_settings(
        pool,
        user_id,
        ProviderSettingsIn(
            enabled=False,
            provider="local",
            model="all-MiniLM-L6-v2",
        ),
        esettings,
    )
    assert await resolve_embedder(pool, user_id, esettings) is None


async def test_settings_change_applies_on_the_next_call(
    pool: asyncpg.Pool, make_settings: Callable[..., Any], user_id: str
) -> None:
    s = make_settings(EmbeddingSettings, embedding_provider="none", secret_key=SecretStr("k"))
    for model in ("a", "b"):
        await put_provider_settings(
            pool,
            user_id,
            ProviderSettingsIn(
                provider="openai",
                endpoint_url="http://127.0.0.1:9/v1",
                model=model,
            ),
            s,
        )
        assert (await resolve_embedder(pool, user_id, s)).model == model  # type: ignore[union-attr]


def test_bad_provider_settings_are_refused_with_a_reason() -> None:
    with pytest.raises(ValidationError, match="needs endpoint_url"):
        ProviderSettingsIn(provider="openai", model="x")
    with pytest.raises(ValidationError, match="local provider runs"):
        ProviderSettingsIn(provider="local", model="bge-large")


async def test_the_key_lookup_brings_its_users_settings_as_they_are_now(
    pool: asyncpg.Pool, esettings: EmbeddingSettings, user_id: str
) -> None:
    from shared.apikeys import create_key, lookup_key
    from shared.embeddings.user_settings import Stored

    _, secret = await create_key(pool, user_id=user_id)
    _, admin_secret = await create_key(pool, user_id=None, is_admin=True)
    key = await lookup_key(pool, secret)
    assert key is not None and key.embedding_settings == Stored(None)
    off = ProviderSettingsIn(enabled=False, provider="local", model="all-MiniLM-L6-v2")
    await put_provider_settings(pool, user_id, off, esettings)
    key = await lookup_key(pool, secret)
    assert key is not None and key.embedding_settings is not None
    row = key.embedding_settings.row
    assert row is not None and row["enabled"] is False and row["model"] == "all-MiniLM-L6-v2"
    admin = await lookup_key(pool, admin_secret)
    assert admin is not None and admin.embedding_settings is None  # acts for others: not read

    class NoReads:
        async def fetchrow(self, *args: Any) -> None:
            raise AssertionError("the settings were given; nothing should be read")

    assert (
        await resolve_embedder(NoReads(), user_id, esettings, stored=key.embedding_settings) is None
    )  # type: ignore[arg-type]
    assert isinstance(
        await resolve_embedder(NoReads(), user_id, esettings, stored=Stored(None)),  # type: ignore[arg-type]
        LocalEmbedder,
    )
