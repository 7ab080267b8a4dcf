"""The memory browser's read-only pages: themes, items, people, episodes, reviews, summary.

Every page shows one user (``Viewer.user_id``) and only reads. A request from
HTMX (``HX-Request``) gets the fragment it swaps in; any other gets the page.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from services.query.api.deps import Pool, State
from services.query.embeddings.query import MAX_SEARCH_CHARS, lists_newest
from services.query.memory.search import memory_search
from services.query.ranking.memories import MAX_LIMIT, SearchParams
from services.query.ui import queries as q
from services.query.ui.session import ViewerDep
from services.query.ui.web import error_page, is_htmx, render
from shared.memory.writer import MEMORY_TYPES

router = APIRouter()

STATES = ("current", "superseded", "expired")
EMBEDDING_STATES = ("pending", "ready", "error")
REVIEW_STATUSES = ("pending", "accepted", "rejected")


class BadInput(ValueError):
    """A query parameter the browser cannot use; shown to the user as a 400."""


def _choice(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise BadInput(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _uuid(name: str, value: str | None) -> uuid.UUID | None:
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise BadInput(f"{name} {value!r} is not an id") from exc


def _cursor(value: str | None) -> q.Cursor | None:
    if not value:
        return None
    try:
        return q.Cursor.parse(value)
    except ValueError as exc:
        raise BadInput(f"after {value!r} is not a page position") from exc


def _offset(value: str | None) -> int:
    if not value:
        return 0
    if not value.isdigit() or int(value) > q.MAX_OFFSET:
        raise BadInput(f"offset must be a whole number up to {q.MAX_OFFSET}")
    return int(value)


def _base(viewer: ViewerDep, active: str) -> dict[str, Any]:
    return {"viewer": viewer, "active": active}


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    ctx = _base(viewer, "themes")
    ctx["counts"] = await q.overview(pool, viewer.user_id)
    ctx["themes"] = await q.themes(pool, viewer.user_id)
    return render(request, "themes.html", ctx)


async def _subjects(pool: Pool, user_id: str, rows: list[Any]) -> dict[uuid.UUID, str]:
    ids = {s for r in rows for s in (r["subjects"] or [])}
    return await q.people_names(pool, user_id, ids)


@router.get("/memories", response_class=HTMLResponse)
async def memories(
    request: Request,
    viewer: ViewerDep,
    pool: Pool,
    state: State,
) -> HTMLResponse:
    p = request.query_params
    try:
        theme = p.get("theme") or None
        if theme is not None and len(theme) > 100:
            raise BadInput("theme is longer than 100 characters")
        where = q.ItemFilter(
            theme=theme,
            type=_choice("type", p.get("type"), MEMORY_TYPES),
            include_archived=p.get("archived") in ("1", "on", "true"),
            state=_choice("state", p.get("state"), STATES),  # type: ignore[arg-type]
            embedding=_choice("embedding", p.get("embedding"), EMBEDDING_STATES),  # type: ignore[arg-type]
            subject=_uuid("person", p.get("person")),
        )
        after = _cursor(p.get("after"))
        text = (p.get("q") or "").strip()
        if len(text) > MAX_SEARCH_CHARS:
            raise BadInput(f"the search text is longer than {MAX_SEARCH_CHARS} characters")
    except BadInput as exc:
        return error_page(request, str(exc), status_code=400)

    params = {
        "theme": where.theme,
        "type": where.type,
        "archived": "1" if where.include_archived else None,
        "state": where.state,
        "embedding": where.embedding,
        "person": p.get("person"),
        "q": text,
    }
    ctx = _base(viewer, "memories")
    ctx.update(params=params, where=where, search_mode=None, next=None)
    if not lists_newest(text):
        # The hybrid search of the agent API; the browser shows archived and
        # superseded matches too when asked, then narrows by its other filters.
        result = await memory_search(
            state,
            pool,
            SearchParams(
                query=text,
                limit=MAX_LIMIT,
                theme=where.theme,
                types=(where.type,) if where.type else None,
                status="any" if where.include_archived else "active",
                include_superseded=True,
                relevant_only=True,  # no floor of 0.000 matches: only the relevant ones
            ),
            user_id=viewer.user_id,
        )
        rows = await q.items_by_id(pool, viewer.user_id, [h.id for h in result.hits])
        rows = [r for r in rows if _matches(r, where)]
        scores = {h.id: h.score for h in result.hits}
        ctx.update(rows=rows, total=len(rows), search_mode=result.mode, scores=scores)
    else:
        page = await q.items(pool, viewer.user_id, where, after=after)
        ctx.update(
            rows=page.rows,
            next=page.next.token() if page.next else None,
            total=await q.count_items(pool, viewer.user_id, where),
            paged=after is not None,
            scores={},
        )
    ctx["people"] = await _subjects(pool, viewer.user_id, ctx["rows"])
    if is_htmx(request):
        return render(request, "_items.html", ctx)
    ctx["themes"] = await q.themes(pool, viewer.user_id)
    ctx["types"] = MEMORY_TYPES
    if where.subject is not None:
        ctx["person"] = await q.person(pool, viewer.user_id, where.subject)
    return render(request, "memories.html", ctx)


def _matches(row: Any, where: q.ItemFilter) -> bool:
    if where.embedding and row["embedding_state"] != where.embedding:
        return False
    if where.subject and where.subject not in (row["subjects"] or []):
        return False
    if where.state == "current":
        return row["superseded_at"] is None and not row["expired"]
    if where.state == "superseded":
        return row["superseded_at"] is not None
    if where.state == "expired":
        return bool(row["expired"])
    return True


@router.get("/memories/{item_id}", response_class=HTMLResponse)
async def memory(item_id: str, request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    try:
        key = _uuid("memory", item_id)
    except BadInput as exc:
        return error_page(request, str(exc), status_code=400)
    assert key is not None
    row = await q.item(pool, viewer.user_id, key)
    if row is None:
        return error_page(request, f"no memory {item_id}", status_code=404)
    ctx = _base(viewer, "memories")
    ctx.update(
        item=row,
        replaces=await q.replaces(pool, viewer.user_id, key),
        people=await _subjects(pool, viewer.user_id, [row]),
        message=await q.source_message(pool, viewer.user_id, row["source_message_id"]),
    )
    return render(request, "memory.html", ctx)


@router.get("/people", response_class=HTMLResponse)
async def people(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    try:
        offset = _offset(request.query_params.get("offset"))
    except BadInput as exc:
        return error_page(request, str(exc), status_code=400)
    rows = await q.people(pool, viewer.user_id, offset=offset)
    ctx = _base(viewer, "people")
    ctx.update(
        people=rows[: q.PAGE_SIZE],
        offset=offset,
        page_size=q.PAGE_SIZE,
        more=len(rows) > q.PAGE_SIZE,
    )
    return render(request, "people.html", ctx)


@router.get("/episodes", response_class=HTMLResponse)
async def episodes(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    try:
        after = _cursor(request.query_params.get("after"))
    except BadInput as exc:
        return error_page(request, str(exc), status_code=400)
    page = await q.episodes(pool, viewer.user_id, after=after)
    ctx = _base(viewer, "episodes")
    ctx.update(
        episodes=page.rows, next=page.next.token() if page.next else None, paged=after is not None
    )
    return render(request, "episodes.html", ctx)


@router.get("/episodes/{episode_id}", response_class=HTMLResponse)
async def episode(episode_id: str, request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    try:
        key = _uuid("episode", episode_id)
    except BadInput as exc:
        return error_page(request, str(exc), status_code=400)
    assert key is not None
    row = await q.episode(pool, viewer.user_id, key)
    if row is None:
        return error_page(request, f"no episode {episode_id}", status_code=404)
    ctx = _base(viewer, "episodes")
    ctx.update(episode=row, items=await q.episode_items(pool, viewer.user_id, key))
    return render(request, "episode.html", ctx)


@router.get("/reviews", response_class=HTMLResponse)
async def reviews(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    p = request.query_params
    try:
        status = _choice("status", p.get("status", "pending"), REVIEW_STATUSES)
        offset = _offset(p.get("offset"))
    except BadInput as exc:
        return error_page(request, str(exc), status_code=400)
    rows = await q.reviews(pool, viewer.user_id, status=status, offset=offset)
    ctx = _base(viewer, "reviews")
    ctx.update(
        reviews=rows[: q.PAGE_SIZE],
        status=status or "",
        offset=offset,
        page_size=q.PAGE_SIZE,
        more=len(rows) > q.PAGE_SIZE,
        statuses=REVIEW_STATUSES,
    )
    return render(request, "reviews.html", ctx)


@router.get("/summary", response_class=HTMLResponse)
async def summary(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    ctx = _base(viewer, "summary")
    ctx["summary"] = await q.summary(pool, viewer.user_id)
    return render(request, "summary.html", ctx)
