from __future__ import annotations

from pydantic import Field

from shared.settings import CommonSettings


class IngestSettings(CommonSettings):
    turn_readers: int = Field(
        default=2, description="batches of turns in flight at once in one ingest process"
    )
