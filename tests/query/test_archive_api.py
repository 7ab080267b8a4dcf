"""Moving a user between deployments over the API: GET /v1/me/export on one, POST
/v1/me/import on another (an empty database on the same server), the rows embedded
again with the real local model, and search answering the same."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import timedelta
from typing import Any

import pytest

from services.ingest.service import store_turns
from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.db import create_pool
from shared.embeddings.rebuild import embed_missing
from shared.streams import Publisher
from tests.query.helpers import auth
from tests.support import running
from tests.test_archive import empty_database, turns_of

pytestmark = pytest.mark.slow  # the local model embeds both deployments

QUESTIONS = ["what dog did we adopt", "when is the launch", "greyhound"]


async def search_all(client: Any, headers: dict[str, str]) -> list[Any]:
    out = []
    for q in QUESTIONS:
        r = await client.post("/v1/messages/search", json={"query": q, "limit": 5}, headers=headers)
        assert r.status_code == 200, r.text
        out.append([(h["content_snippet"], round(h["score"], 4)) for h in r.json()["results"]])
        r = await client.post("/v1/memory/search", json={"query": q, "limit": 5}, headers=headers)
        assert r.status_code == 200, r.text
        out.append([(h["content_snippet"], round(h["score"], 4)) for h in r.json()["results"]])
    return out


async def test_export_import_between_deployments_answers_search_the_same(
    pool, redis, make_settings, infra, user_id
):
    settings = make_settings(QuerySettings)
    await store_turns(
        pool, Publisher(redis, settings), turns_of(user_id), stale_window=timedelta(minutes=30)
    )
    async with running(create_app(settings)) as a:
        headers = await auth(pool, user_id)
        for text in ["Ada adopted a greyhound named Biscuit", "The launch is on May 4"]:
            r = await a.post(
                "/v1/memory/add", json={"type": "fact", "content": text}, headers=headers
            )
            assert r.status_code == 200, r.text
        await embed_missing(pool, settings, user_id=user_id)
        before = await search_all(a, headers)
        r = await a.get("/v1/me/export", headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/zip"
        body = r.content
    manifest = json.loads(zipfile.ZipFile(io.BytesIO(body)).read("manifest.json"))
    assert manifest["tables"]["messages"] == 4 and manifest["tables"]["memory_items"] == 2

    async with empty_database(infra) as target_url:
        target = make_settings(QuerySettings, database_url=target_url)
        tpool = await create_pool(target_url, max_size=2)
        try:
            async with running(create_app(target)) as b:
                theirs = await auth(tpool, user_id)
                zipped = {**theirs, "Content-Type": "application/zip"}
                r = await b.post("/v1/me/import", content=body, headers=zipped)
                assert r.status_code == 200, r.text
                out = r.json()
                assert out["tables"]["messages"]["inserted"] == 4
                assert out["tables"]["memory_items"]["inserted"] == 2
                # re-embedding with this deployment's model, tracked as a rebuild
                assert out["embedding"]["pending"] == 6  # 4 turns, 2 memories
                r = await b.get("/v1/embeddings/rebuild", headers=theirs)
                assert r.status_code == 200 and r.json()["status"]["running"] is True, r.text
                await embed_missing(tpool, target, user_id=user_id)
                assert await search_all(b, theirs) == before
                # a second import stores nothing new
                r = await b.post("/v1/me/import", content=body, headers=zipped)
                assert r.status_code == 200 and r.json()["inserted"] == 0
                # a newer archive version, or not an archive: a clear 4xx
                newer = _with_manifest(body, version=99)
                r = await b.post("/v1/me/import", content=newer, headers=zipped)
                assert r.status_code == 400 and "newer than this engram reads" in r.text
                r = await b.post("/v1/me/import", content=b"PK not a zip", headers=zipped)
                assert r.status_code == 400 and "not a zip" in r.text
                # mem0's export, as JSON, into the caller's memory
                mem0 = [
                    {
                        "id": "m-1",
                        "memory": "Prefers window seats",
                        "user_id": "alex",
                        "created_at": "2025-01-02T03:04:05+00:00",
                        "categories": ["travel"],
                    },
                ]
                r = await b.post("/v1/me/import?source=mem0", json=mem0, headers=theirs)
                assert r.status_code == 200, r.text
                assert r.json()["tables"]["memory_items"]["inserted"] == 1
        finally:
            await tpool.close()


def _with_manifest(body: bytes, **changes: Any) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(body))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for name in src.namelist():
            data = src.read(name)
            if name == "manifest.json":
                data = json.dumps({**json.loads(data), **changes}).encode()
            out.writestr(name, data)
    return buf.getvalue()


async def test_an_import_over_its_limit_is_refused_and_other_bodies_keep_theirs(
    pool, make_settings, user_id
):
    settings = make_settings(QuerySettings, max_import_bytes=2_000, max_request_bytes=1_000)
    headers = await auth(pool, user_id)
    async with running(create_app(settings)) as c:
        zipped = {**headers, "Content-Type": "application/zip"}
        r = await c.post("/v1/me/import", content=b"x" * 3_000, headers=zipped)
        assert r.status_code == 413 and "ENGRAM_MAX_IMPORT_BYTES" in r.text
        # under the import's limit but over the ordinary one: the import reads it
        r = await c.post("/v1/me/import", content=b"x" * 1_500, headers=zipped)
        assert r.status_code == 400 and "not a zip" in r.text
        r = await c.post(
            "/v1/memory/add", json={"type": "fact", "content": "y" * 1_500}, headers=headers
        )
        assert r.status_code == 413
