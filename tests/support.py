"""Helpers for tests: run a service in-process or as a process, wait for conditions."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from shared.settings import CommonSettings

ROOT = Path(__file__).resolve().parent.parent
# The int8 model's export, made once per checkout and shared by every test session.
MODELS = ROOT / ".engram" / "models"


async def wait_for(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


@contextlib.asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app``'s lifespan in this event loop; yield an HTTP client bound to it."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


def service_env(settings: CommonSettings, **extra: str) -> dict[str, str]:
    """Environment for a service subprocess that uses ``settings``."""
    env = dict(os.environ)
    for key, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        env[f"ENGRAM_{key.upper()}"] = str(value)
    assert settings.database_url and settings.redis_url
    env["ENGRAM_DATABASE_URL"] = settings.database_url.get_secret_value()
    env["ENGRAM_REDIS_URL"] = settings.redis_url.get_secret_value()
    env.update(extra)
    return env


def start_service(name: str, settings: CommonSettings, **extra: str) -> subprocess.Popen[bytes]:
    """Start ``python -m services.<name>`` as a real process."""
    return subprocess.Popen(
        [sys.executable, "-m", f"services.{name}"],
        env=service_env(settings, **extra),
        cwd=ROOT,
    )


async def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    async def ok() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"service exited with code {proc.returncode}")
        try:
            async with httpx.AsyncClient() as c:
                r = await c.get(f"http://127.0.0.1:{port}/health", timeout=1)
                return r.status_code == 200
        except httpx.HTTPError:
            return False

    await wait_for(ok, timeout=timeout, interval=0.2, message=f"service on :{port} healthy")
