"""The int8 ONNX model: exported offline from the installed model, close to PyTorch's vectors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.embeddings import local, local_onnx
from shared.embeddings.local import LocalEmbedder

pytestmark = pytest.mark.slow

SAMPLES = [
    "My daughter's birthday party is on Saturday.",
    "We are celebrating my girl's birthday this weekend.",
    "The quarterly tax filing deadline moved to April.",
    "[2023-05-08 13:56] Caroline: I went to a LGBTQ support group yesterday and it was "
    "so powerful.",
    "Ünïcödé café naïve résumé — 東京 🙂",
    "Melanie: Thanks! I painted that lake sunrise last year, it's special to me.",
    "the plumber fixes the leaking kitchen tap on Tuesday " * 40,  # past 256 tokens
]

# Sentences land within cosine 0.99 of PyTorch's vectors on average, each within
# 0.98. A word or two (or nothing) has few activations to spread int8's error over:
# these land within 0.95 (0.94 is the floor tested).
SHORT = ["hi", "ok", "thanks!", ""]

# The export in a child process whose sockets all refuse: any download attempt fails it.
NO_NETWORK = """
import socket, sys
from pathlib import Path
def refuse(*args, **kwargs):
    raise OSError("network access during the export")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from shared.embeddings import local_onnx
local_onnx.export(Path(sys.argv[1]))
"""


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding the int8 file, exported with the network refused."""
    cache = tmp_path_factory.mktemp("models")
    out = local_onnx.cached_path(cache)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-c", NO_NETWORK, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return cache


def test_the_export_runs_without_network_access(cache_dir: Path) -> None:
    out = local_onnx.cached_path(cache_dir)
    assert out.stat().st_size > 10_000_000
    # ensure_exported finds it and exports nothing anew.
    before = out.stat().st_mtime_ns
    assert local_onnx.ensure_exported(cache_dir) == out
    assert out.stat().st_mtime_ns == before


async def test_int8_and_pytorch_vectors_agree_to_cosine_099(cache_dir: Path) -> None:
    local.configure(workers=1, threads=0, cache_dir=cache_dir)
    int8 = LocalEmbedder(model=local.INT8_MODEL, batch_size=4)
    assert (int8.provider, int8.model, int8.dimensions) == ("local", "all-MiniLM-L6-v2-int8", 384)
    onnx_vectors = await int8.embed(SAMPLES + SHORT)
    torch_vectors = await LocalEmbedder(model=local.MODEL_NAME, batch_size=4).embed(SAMPLES + SHORT)
    assert all(len(v) == 384 for v in onnx_vectors)
    cosines = [cosine(a, b) for a, b in zip(onnx_vectors, torch_vectors, strict=True)]
    for text, a, c in zip(SAMPLES + SHORT, onnx_vectors, cosines, strict=True):
        assert math.isclose(sum(x * x for x in a), 1.0, abs_tol=1e-4)
        assert c >= (0.98 if text in SAMPLES else 0.94), text[:40]
    assert sum(cosines[: len(SAMPLES)]) / len(SAMPLES) >= 0.99
    # A text's vector barely depends on its batch (activations are quantized with one
    # scale per batch, so its companions move it a little) and not on its place.
    alone = [(await int8.embed([t]))[0] for t in reversed(SAMPLES)][::-1]
    for a, b in zip(onnx_vectors[: len(SAMPLES)], alone, strict=True):
        assert cosine(a, b) > 0.98


async def test_a_paraphrase_scores_closer_than_an_unrelated_sentence_with_int8(
    cache_dir: Path,
) -> None:
    local.configure(workers=1, threads=0, cache_dir=cache_dir)
    a, b, c = await LocalEmbedder(model=local.INT8_MODEL).embed(SAMPLES[:3])
    assert cosine(a, b) > cosine(a, c) + 0.2


def test_passes_hold_about_256_tokens_longest_first_and_vectors_keep_their_order(
    cache_dir: Path,
) -> None:
    """A pass over 64 chat turns padded to the longest cost 2.5-3.5x the CPU per text of
    passes of ~256 tokens, and its activations stayed with the process."""
    model = local_onnx.OnnxModel(local_onnx.cached_path(cache_dir), threads=1)
    shapes: list[tuple[int, int]] = []
    session = model._session

    class Recording:
        def run(self, names: Any, feeds: dict[str, Any]) -> Any:
            shapes.append(feeds["input_ids"].shape)
            return session.run(names, feeds)

    model._session = Recording()
    texts = [f"turn {i}: " + "we talked about the trip " * (i % 9) for i in range(40)]
    texts.append(SAMPLES[-1])  # past 256 tokens: a pass of its own
    vectors = model.encode(texts, batch_size=64)
    assert sum(rows for rows, _ in shapes) == len(texts)
    assert all(rows * width <= local_onnx.TOKENS_PER_PASS or rows == 1 for rows, width in shapes)
    assert [w for _, w in shapes] == sorted((w for _, w in shapes), reverse=True)
    assert shapes[0] == (1, local_onnx.MAX_TOKENS) and len(shapes) > 3
    shapes.clear()
    assert len(model.encode(texts[:3], batch_size=2)) == 3 and max(r for r, _ in shapes) <= 2
    alone = [model.encode([t], batch_size=64)[0] for t in texts[::7]]
    for a, b in zip(vectors[::7], alone, strict=True):
        assert cosine(list(a), list(b)) > 0.98


async def test_embed_now_runs_on_the_calling_thread_only_when_it_need_not_wait(
    cache_dir: Path,
) -> None:
    """The query service embeds a short query on its event loop (no thread hop) with
    ``embed_now``: the same vector as ``embed``; None (use ``embed``) while the model is
    not loaded or while another pass holds it."""
    local.configure(workers=1, threads=1, cache_dir=cache_dir)
    int8 = LocalEmbedder(model=local.INT8_MODEL)
    assert int8.embed_now(["red car"]) is None  # not loaded yet: never loaded on the loop
    [threaded] = await int8.embed(["red car"])
    assert int8.embed_now(["red car"]) == [threaded]
    with local._passes:  # a pass running in a worker thread
        assert int8.embed_now(["red car"]) is None
    assert int8.embed_now(["red car"]) == [threaded]
