"""Extraction benchmark on the LoCoMo conversations (path as an argument; CC BY-NC, not copied).

    python -m bench.extract PATH/TO/locomo10.json [--llm-episodes 20] [--conversations 10]

1. Quality (``bench/extract_quality.py``): what the offline extractor learns from
   each LoCoMo session through ingest's and the extractor's use cases on a real
   PostgreSQL, against the dataset's observations and session summaries.
2. Offline extractor: episodes per second for summary + fact candidates + the
   fact rules that need no database (secrets, relative dates), each LoCoMo
   session being one episode (speaker A is the "user", speaker B the other side).
3. Language-model path: the real client and prompts against a *scripted*
   OpenAI-compatible server on loopback; it reports prompt tokens estimated as
   characters / 4 of the messages it receives and answers with fixed JSON, so
   the prompt side reflects engram's prompts and transcripts, the completion
   side does not reflect any real model.

Writes bench/results/extract.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench import extract_quality as quality
from engram_cli.embedded import free_port
from shared.dates import resolve_relative_dates
from shared.llm.client import OpenAIChatModel
from shared.llm.jobs import LLMExtractor
from shared.llm.offline import OfflineExtractor
from shared.llm.transcript import Line, Transcript
from shared.memory.secrets import find_secret

RESULTS = Path(__file__).parent / "results" / "extract.json"


def load_episodes(path: Path) -> list[tuple[Transcript, datetime]]:
    data = json.loads(path.read_text())
    out = []
    for sample in data:
        conv = sample["conversation"]
        a = conv["speaker_a"]
        keys = sorted(
            (k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])
        )
        for key in keys:
            lines = []
            for turn in conv[key]:
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares an image: {turn['blip_caption']}]"
                role = "user" if turn["speaker"] == a else "assistant"
                lines.append(Line(role, turn["speaker"], text))
            when = _when(conv.get(f"{key}_date_time", ""))
            out.append((Transcript(lines, user_name=a), when))
    return out


def _when(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return datetime(2023, 1, 1, tzinfo=UTC)


async def offline(episodes: list[tuple[Transcript, datetime]]) -> dict[str, Any]:
    ex = OfflineExtractor()
    times: list[float] = []
    facts = kept = 0
    started = time.perf_counter()
    for transcript, when in tqdm(episodes, desc="offline", unit="ep", file=sys.stderr):
        t0 = time.perf_counter()
        summary = await ex.summarize(transcript)
        candidates = await ex.extract_facts(transcript, summary, occurred_at=when)
        await ex.extract_standing(transcript, occurred_at=when)
        for c in candidates:
            if find_secret(c.content) is None:
                resolve_relative_dates(c.content, when)
                kept += (c.confidence or 0) >= 0.6
        facts += len(candidates)
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - started
    turns = sum(t.turns for t, _ in episodes)
    return {
        "episodes": len(episodes),
        "turns": turns,
        "seconds": round(wall, 3),
        "episodes_per_s": round(len(episodes) / wall, 1),
        "turns_per_s": round(turns / wall, 1),
        "mean_ms_per_episode": round(statistics.mean(times) * 1000, 2),
        "p95_ms_per_episode": round(sorted(times)[int(len(times) * 0.95)] * 1000, 2),
        "fact_candidates_per_episode": round(facts / len(episodes), 2),
        "candidates_at_or_above_0.6_per_episode": round(kept / len(episodes), 2),
        "scope": "summary + pattern facts + standing instructions and preferences + secret "
        "filter + date resolution; no database",
    }


class _Scripted:
    """Loopback chat-completions server: usage = characters / 4, fixed JSON answers."""

    ANSWERS = {
        "structured summary": {
            "title": "Catching up about work and family",
            "summary": "They talked about recent events. " * 12,
            "key_points": ["point one", "point two", "point three"],
            "outcome": "informational",
            "topics": ["family", "work"],
        },
        "extract any facts": {
            "facts": [
                {
                    "subject": "user",
                    "content": "A fact of a few words",
                    "category": "person",
                    "confidence": 0.8,
                }
            ]
            * 3
        },
    }

    def __init__(self) -> None:
        self.port = free_port()
        answers = self.ANSWERS

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                text = "".join(m["content"] for m in body["messages"])
                answer = next((v for k, v in answers.items() if k in text), {"same": False})
                content = json.dumps(answer)
                usage = {"prompt_tokens": len(text) // 4, "completion_tokens": len(content) // 4}
                data = json.dumps(
                    {
                        "choices": [{"message": {"role": "assistant", "content": content}}],
                        "usage": usage,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


async def llm_path(episodes: list[tuple[Transcript, datetime]], n: int) -> dict[str, Any]:
    server = _Scripted()
    client = OpenAIChatModel(base_url=f"http://127.0.0.1:{server.port}/v1", model="scripted")
    ex = LLMExtractor(client)
    step = max(1, len(episodes) // n)
    sample = episodes[::step][:n]
    per_episode: list[int] = []
    try:
        for transcript, when in tqdm(sample, desc="llm (scripted)", unit="ep", file=sys.stderr):
            before = client.usage.total_tokens
            summary = await ex.summarize(transcript)
            await ex.extract_facts(transcript, summary, occurred_at=when)
            await ex.extract_standing(transcript, occurred_at=when)
            per_episode.append(client.usage.total_tokens - before)
    finally:
        await client.aclose()
        server.server.shutdown()
    u = client.usage
    return {
        "episodes": len(sample),
        "requests_per_episode": round(u.requests / len(sample), 2),
        "prompt_tokens_per_episode": round(u.prompt_tokens / len(sample), 1),
        "completion_tokens_per_episode": round(u.completion_tokens / len(sample), 1),
        "tokens_per_episode_mean": round(statistics.mean(per_episode), 1),
        "tokens_per_episode_max": max(per_episode),
        "by_purpose": {k: round(v / len(sample), 1) for k, v in u.by_purpose.items()},
        "note": "scripted loopback server; tokens estimated as characters/4 of the prompts "
        "engram sends; completions are fixed JSON, not a real model's",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "locomo", type=Path, nargs="?", default=Path("../shared/data/locomo/locomo10.json")
    )
    parser.add_argument("--llm-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--conversations", type=int, default=None, help="quality on the first N (sample_id order)"
    )
    parser.add_argument(
        "--samples", type=Path, default=None, help="write what was learned per session here"
    )
    parser.add_argument("--no-quality", action="store_true", help="speed and tokens only")
    parser.add_argument("--quality-only", action="store_true", help="no speed or token runs")
    args = parser.parse_args()
    if not args.locomo.exists():
        parser.error(f"{args.locomo} not found (LoCoMo's locomo10.json)")
    episodes = load_episodes(args.locomo)
    q: dict[str, Any] | None = None
    if not args.no_quality:
        convs = quality.load(args.locomo, args.conversations)
        records, seconds = quality.learn(convs)
        q = asyncio.run(quality.score(records, convs))
        q["conversations"] = [c.sample_id for c in convs]
        q["seconds"] = round(seconds, 1)
        q["path"] = "ingest store_turns + extractor extract_episode (offline), real PostgreSQL"
        if args.samples:  # holds LoCoMo text: keep it out of the repository
            args.samples.write_text(json.dumps(records, indent=1, default=str) + "\n")
    result = {
        "dataset": str(args.locomo),
        "conversations": 10,
        "episodes": len(episodes),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "quality": q,
    }
    if args.quality_only:
        result["offline"] = result["llm_scripted"] = None
    else:
        result["offline"] = asyncio.run(offline(episodes))
        result["llm_scripted"] = asyncio.run(llm_path(episodes, args.llm_episodes))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    o, m = result["offline"], result["llm_scripted"]
    rows: list[tuple[str, Any]] = []
    if o is not None and m is not None:
        rows = [
            ("episodes (LoCoMo sessions)", o["episodes"]),
            ("turns", o["turns"]),
            ("offline episodes/s", o["episodes_per_s"]),
            ("offline turns/s", o["turns_per_s"]),
            ("offline ms/episode (mean)", o["mean_ms_per_episode"]),
            ("offline ms/episode (p95)", o["p95_ms_per_episode"]),
            ("offline fact candidates/episode", o["fact_candidates_per_episode"]),
            ("offline candidates >= 0.6/episode", o["candidates_at_or_above_0.6_per_episode"]),
            ("LLM path requests/episode (scripted)", m["requests_per_episode"]),
            ("LLM path prompt tokens/episode (chars/4)", m["prompt_tokens_per_episode"]),
            ("LLM path total tokens/episode (scripted)", m["tokens_per_episode_mean"]),
        ]
        print(f"\n{'measure':<46}{'value':>14}")
        print("-" * 60)
    for label, value in rows:
        print(f"{label:<46}{value:>14}")
    if q is not None:
        print(f"\nquality ({len(q['conversations'])} conversations, {q['sessions']} sessions)")
        print("-" * 60)
        for label, key in quality.QUALITY_ROWS:
            print(f"{label:<46}{json.dumps(q[key]):>14}")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
