"""Memory settings (Nova 0.2, 3.1.3, 3.2.7): the embedding provider form, the endpoint
test, and the provider/model change flow with its rebuild.

Flow: "Test embeddings endpoint" probes the form's values (nothing stored).
"Save" first tries a new endpoint: one that fails is stored only after "Save anyway".
It stores a change that leaves the provider in effect as it was; a change
of provider or model first answers with an inline confirmation naming how many
embeddings will be rebuilt, and only "Confirm" stores it and starts the
rebuild, whose progress the page then polls. Memory content is never edited.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import SecretStr, ValidationError

from services.query.deps import Pool, Pub, settings
from services.query.ui.session import SameOrigin, ViewerDep
from services.query.ui.web import render
from shared.embeddings import (
    ProviderConfig,
    ProviderSettingsIn,
    config_from_input,
    get_provider_settings,
    probe_endpoint,
    put_provider_settings,
    resolve_config,
)
from shared.embeddings.providers import system_config
from shared.embeddings.rebuild import rebuild_count, rebuild_progress, start_rebuild
from shared.embeddings.user_settings import as_embedding_settings, stored_api_key
from shared.outbound import EndpointRefused
from shared.settings import CommonSettings

router = APIRouter()

PROVIDERS = ("local", "openai", "ollama")


def _settings(request: Request) -> CommonSettings:
    return settings(request)


class FormError(ValueError):
    pass


async def _form(request: Request) -> ProviderSettingsIn:
    """The provider form as the settings API's input model; a blank API key keeps the
    stored one, "remove key" removes it."""
    form = await request.form()

    def text(name: str) -> str:
        value = form.get(name)
        return value.strip() if isinstance(value, str) else ""

    values: dict[str, Any] = {
        "enabled": text("enabled") in ("1", "on", "true"),
        "provider": text("provider"),
        "endpoint_url": text("endpoint_url") or None,
        "model": text("model"),
    }
    if text("remove_key"):
        values["api_key"] = SecretStr("")
    elif text("api_key"):
        values["api_key"] = SecretStr(text("api_key"))
    dims = text("dimensions")
    if dims:
        if not dims.isdigit():
            raise FormError("dimensions must be a whole number")
        values["dimensions"] = int(dims)
    try:
        return ProviderSettingsIn.model_validate(values)
    except ValidationError as exc:
        messages = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"])
            messages.append(f"{where}: {err['msg']}" if where else err["msg"])
        raise FormError("; ".join(messages)) from exc


def _effective_after(
    settings: CommonSettings, new: ProviderSettingsIn, stored_key: SecretStr | None
) -> ProviderConfig | None:
    """What would be in effect once ``new`` is stored (the precedence of user_settings)."""
    if not new.enabled:
        return None
    s = as_embedding_settings(settings)
    system = system_config(s)
    if system is None or s.embedding_user_override:
        return config_from_input(new, stored_key=stored_key)
    return system


def _identity(config: ProviderConfig | None) -> tuple[Any, ...] | None:
    if config is None:
        return None
    return (config.provider, config.model, config.endpoint_url, config.dimensions)


@router.get("/settings", response_class=HTMLResponse)
async def settings_page(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    s = _settings(request)
    current = await get_provider_settings(pool, viewer.user_id, s)
    s_emb = as_embedding_settings(s)
    return render(
        request,
        "settings.html",
        {
            "viewer": viewer,
            "active": "settings",
            "current": current,
            "providers": PROVIDERS,
            "count": await rebuild_count(pool, viewer.user_id),
            "rebuild": await rebuild_progress(pool, viewer.user_id),
            "system": system_config(s_emb),
            "user_override": s_emb.embedding_user_override,
            "column_dim": s.embedding_dim,
        },
    )


@router.post("/settings/test", response_class=HTMLResponse, dependencies=[SameOrigin])
async def test_endpoint(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    s = _settings(request)
    try:
        new = await _form(request)
    except FormError as exc:
        return render(request, "_probe.html", {"error": str(exc), "result": None}, status_code=400)
    stored_key = await stored_api_key(pool, viewer.user_id, s, new.endpoint_url)
    config = config_from_input(new, stored_key=stored_key)
    try:
        result = await probe_endpoint(config, s)
    except EndpointRefused as exc:
        return render(request, "_probe.html", {"error": str(exc), "result": None}, status_code=422)
    return render(
        request, "_probe.html", {"error": None, "result": result, "column_dim": s.embedding_dim}
    )


@router.post("/settings/save", response_class=HTMLResponse, dependencies=[SameOrigin])
async def save(request: Request, viewer: ViewerDep, pool: Pool, publisher: Pub) -> HTMLResponse:
    s = _settings(request)
    try:
        new = await _form(request)
    except FormError as exc:
        return render(request, "_saved.html", {"error": str(exc)}, status_code=400)
    form = await request.form()
    confirmed = form.get("confirm") == "1"
    untested_ok = form.get("untested") == "1"
    before = await resolve_config(pool, viewer.user_id, s)
    after = _effective_after(
        s, new, await stored_api_key(pool, viewer.user_id, s, new.endpoint_url)
    )
    changed = after is not None and _identity(before) != _identity(after)
    if changed and after is not None and after.endpoint_url and not untested_ok:
        # a new endpoint is tried before it is stored: one that fails is saved only when
        # the person says so (the vectors would all be errors until it works)
        try:
            probe = await probe_endpoint(after, s)
        except EndpointRefused as exc:  # an address this deployment does not call
            return render(request, "_saved.html", {"error": str(exc)}, status_code=422)
        if not probe.ok:
            return render(request, "_untested.html", {"result": probe})
    count = await rebuild_count(pool, viewer.user_id)
    if changed and count.total > 0 and not confirmed:
        return render(
            request,
            "_confirm.html",
            {"before": before, "after": after, "count": count, "untested": untested_ok},
        )
    try:
        saved = await put_provider_settings(pool, viewer.user_id, new, s)
    except EndpointRefused as exc:
        return render(request, "_saved.html", {"error": str(exc)}, status_code=422)
    rebuild = None
    if changed and count.total > 0:
        rebuild = await start_rebuild(pool, viewer.user_id, s, publisher=publisher)
    return render(
        request,
        "_saved.html",
        {
            "error": None,
            "saved": saved,
            "changed": changed,
            "rebuild": rebuild,
            "in_effect": after is not None and after.source == "user",
        },
    )


@router.get("/settings/rebuild", response_class=HTMLResponse)
async def rebuild_status(request: Request, viewer: ViewerDep, pool: Pool) -> HTMLResponse:
    return render(
        request, "_rebuild.html", {"rebuild": await rebuild_progress(pool, viewer.user_id)}
    )
