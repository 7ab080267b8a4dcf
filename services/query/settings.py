from __future__ import annotations

from pydantic import Field

from shared.settings import CommonSettings


class QuerySettings(CommonSettings):
    """Settings of the agent API."""

    cookie_secure: bool = Field(
        default=False, description="mark the browser's key cookie Secure (set true behind HTTPS)"
    )
