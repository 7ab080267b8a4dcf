"""A user's whole memory as a portable archive: ``GET /v1/me/export`` and
``POST /v1/me/import`` (the format: docs/archive.md; the work: shared/archive.py).

An import answers once every row is stored; the rows are embedded again with this
deployment's model by the embedder service, and ``GET /v1/embeddings/rebuild``
shows that progress.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from services.query.api.auth import UserId
from services.query.api.deps import Pool, Pub, Settings
from shared import archive
from shared.embeddings.rebuild import RebuildStatus, reembed_rows
from shared.errors import InvalidRequest

router = APIRouter(prefix="/v1/me", tags=["account"])

CHUNK = 256 * 1024
IMPORT_PATH = "/v1/me/import"
ZIP = "application/zip"


class TableImported(BaseModel):
    rows: int = Field(description="rows of this table in the archive")
    inserted: int
    skipped: int = Field(description="already here (a second import) or a value the user has")


class ImportOut(BaseModel):
    user_id: str
    archive_user_id: str
    inserted: int
    tables: dict[str, TableImported]
    dropped_columns: dict[str, list[str]] = Field(
        description="columns of the archive this schema does not have, left out, per table"
    )
    embedding: RebuildStatus | None = Field(
        description="the re-embedding with this deployment's model (null: embeddings are off "
        "for the user); follow it with GET /v1/embeddings/rebuild"
    )


@router.get(
    "/export",
    summary="The caller's whole memory as a portable archive (zip of JSON lines, no vectors)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "the archive (docs/archive.md)",
            "content": {ZIP: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def export(user_id: UserId, pool: Pool) -> StreamingResponse:
    spool = tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024)  # noqa: SIM115
    try:
        async with pool.acquire() as conn:
            await archive.export_user(conn, user_id, spool)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)

    async def body() -> AsyncIterator[bytes]:
        try:
            while chunk := spool.read(CHUNK):
                yield chunk
        finally:
            spool.close()

    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in user_id)[:100]
    return StreamingResponse(
        body(),
        media_type=ZIP,
        headers={"Content-Disposition": f'attachment; filename="{name}.engram.zip"'},
    )


@router.post(
    "/import",
    summary="Import an archive (engram's, or mem0's export as JSON) as the caller; "
    "re-embedded in the background",
    response_model=ImportOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                ZIP: {"schema": {"type": "string", "format": "binary"}},
                "application/json": {
                    "schema": {"description": "with source=mem0: mem0's get_all() answer"}
                },
            },
        }
    },
)
async def import_(
    request: Request,
    user_id: UserId,
    pool: Pool,
    publisher: Pub,
    settings: Settings,
    source: Literal["engram", "mem0"] = Query(
        "engram", description="engram's archive (a zip) or mem0's export (JSON)"
    ),
    with_settings: bool = Query(
        False, description="also take the archive's embedding settings (they carry no key)"
    ),
    mem0_user: str | None = Query(
        None, max_length=200, description="with source=mem0: whose memories, if it holds several"
    ),
) -> ImportOut:
    body = await request.body()
    if not body:
        raise InvalidRequest("the request body is empty: send the archive")
    if source == "mem0":
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise InvalidRequest(
                "with source=mem0 the body must be mem0's export as JSON"
            ) from None
        # a user key imports its own memories, whichever user the export names
        zf = archive.from_mem0(data, user_id=mem0_user or _only_user(data))
    else:
        zf = archive.open_archive(body)
    async with pool.acquire() as conn:
        result = await archive.import_user(
            conn,
            zf,
            user_id=user_id,
            with_settings=with_settings,
            actor="user",
        )
    status = await reembed_rows(pool, user_id, settings, result.to_embed, publisher=publisher)
    return ImportOut(
        user_id=result.user_id,
        archive_user_id=result.source_user_id,
        inserted=result.inserted,
        tables={
            k: TableImported(rows=t.rows, inserted=t.inserted, skipped=t.skipped)
            for k, t in result.tables.items()
        },
        dropped_columns=result.dropped_columns,
        embedding=status,
    )


def _only_user(data: Any) -> str | None:
    """mem0's export for one user: take its memories whatever id it calls the user."""
    items = data.get("results", data.get("memories")) if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    owners = {m.get("user_id") for m in items if isinstance(m, dict) and m.get("user_id")}
    return owners.pop() if len(owners) == 1 else None
