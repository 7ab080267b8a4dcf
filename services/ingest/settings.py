from __future__ import annotations

from pydantic import Field

from shared.settings import CommonSettings


class IngestSettings(CommonSettings):
    stale_window_minutes: float = Field(
        default=30.0, description="a turn this long after its chat's last one opens a new episode"
    )
    turn_readers: int = Field(
        default=2, description="batches of turns in flight at once in one ingest process"
    )
