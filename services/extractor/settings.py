from __future__ import annotations

from pydantic import Field

from shared.embeddings import EmbeddingSettings
from shared.llm.settings import LLMSettings


class ExtractorSettings(LLMSettings, EmbeddingSettings):
    sweep_interval_s: float = Field(default=60.0, description="how often the sweeper runs")
    sweep_batch: int = Field(default=500, description="episodes the sweeper takes per run")
    max_facts_per_episode: int = Field(default=5, description="new facts stored per episode")
    extract_batch: int = Field(default=8, description="extract requests read at once")
    extract_parallel: int = Field(default=4, description="episodes extracted at once")
    extract_per_user: int = Field(
        default=2,
        description="of one user's episodes per read; the rest go to the back of the stream",
    )
    consolidate_interval_s: float = Field(
        default=300.0, description="how often consolidation looks for users that are due"
    )
    consolidate_min_gap_s: float = Field(
        default=3600.0,
        description="a user with new memories is consolidated at most this often (asked-for runs "
        "are not held back)",
    )
    consolidate_batch: int = Field(default=4, description="users consolidated per tick")
    memory_cap: int | None = Field(
        default=20_000,
        description="live memories per user beyond which consolidated, never-read ones are "
        "archived (None: no cap)",
    )
