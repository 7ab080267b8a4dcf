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
