"""What embedding long turns as passages costs: BEAM's turns through the int8 model,
each turn's head alone (before) against its head and its passages (after).

    python -m bench.long_turns --dataset beam PATH/chats/100K [--conversations N]

The texts are the embedder's (``store.message_text`` for the head, ``<date>
<speaker>: <passage>`` for each passage, ``shared/embeddings/passages.py``); the
model is the local int8 one on one thread, as the embedder runs each pass. For
each side: the texts, the word pieces the model reads (256 at most a text), the
share of each turn's word pieces read at all (coverage), the process's CPU
seconds and word pieces per CPU second (CPU time, not wall time: the machine is
shared). Time to searchable through the pipeline is the loading line of
``bench.context --quality`` / ``bench.locomo`` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC
from pathlib import Path
from typing import Any

from bench.common import write_result
from bench.locomo import add_dataset_arguments, dataset
from shared.embeddings import local_onnx, passages, store

ROLE = {"User": "user", "Assistant": "assistant"}


def texts(convs: list[Any]) -> tuple[list[str], list[str], list[str]]:
    """Every turn's head text, its passages' texts, and its whole text."""
    heads, parts, whole = [], [], []
    for c in convs:
        for t in c.turns:
            role = ROLE.get(t.speaker, "user")
            at = t.when.astimezone(UTC)
            heads.append(
                store.message_text(store.collapse(t.text), role, None, None, None, at=at)[:8000]
            )
            whole.append(store.message_text(store.collapse(t.text), role, None, None, None, at=at))
            head = store.message_head(role, at=at)
            parts.extend(head + p.text for p in passages.split(t.text) if p.idx > 0)
    return heads, parts, whole


def run(path: Path, set_name: str, n: int | None = None) -> dict[str, Any]:
    convs = dataset(set_name).load(path)[:n]
    heads, parts, whole = texts(convs)
    model = local_onnx.OnnxModel(local_onnx.ensure_exported(Path(".engram/models")), threads=1)
    tok = model._tokenizer
    read = [len(e.ids) for e in tok.encode_batch(heads)]
    read_parts = [len(e.ids) for e in tok.encode_batch(parts)]
    tok.no_truncation()
    total = sum(len(e.ids) for e in tok.encode_batch(whole))
    tok.enable_truncation(local_onnx.MAX_TOKENS)
    out: dict[str, Any] = {
        "set": set_name,
        "conversations": [c.sample_id for c in convs],
        "turns": len(heads),
        "word_pieces": total,
    }
    for side, batch, pieces in (
        ("head only", heads, sum(read)),
        ("passages", parts, sum(read_parts)),
    ):
        started = time.process_time()
        model.encode(batch, batch_size=64)
        cpu = time.process_time() - started
        out[side] = {
            "texts": len(batch),
            "word_pieces": pieces,
            "cpu_s": round(cpu, 1),
            "word_pieces_per_cpu_s": round(pieces / cpu),
        }
        print(side, out[side], flush=True)
    out["coverage"] = {
        "head only": round(sum(read) / total, 3),
        "head and passages": round(min(1.0, (sum(read) + sum(read_parts)) / total), 3),
    }
    after = out["head only"]["cpu_s"] + out["passages"]["cpu_s"]
    out["cpu_ratio"] = round(after / out["head only"]["cpu_s"], 2)
    out["note"] = "2-core machine shared with other engineers' work; CPU time of this process"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_arguments(p)
    p.add_argument("--conversations", type=int, default=None, help="only the first N")
    p.add_argument("--name", default="long_turns", help="bench/results/<name>.json")
    args = p.parse_args()
    if args.locomo is None:
        p.error("give the set's path")
    result = run(args.locomo, args.dataset, args.conversations)
    print(result)
    print(f"written to {write_result(args.name, result)}")


if __name__ == "__main__":
    main()
