"""``engram publish``: publish JSON-lines events (turns or episode events) to Redis.

Each line is one event. A line with ``"schema": "episode.started.v1"`` or
``"episode.closed.v1"`` goes to ``episodes``; anything else is a turn and goes
to ``turns``. A line without ``event_id`` gets one derived from its content, so
publishing the same file twice stores it once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any, TextIO

import redis.asyncio as aioredis
from pydantic import ValidationError

from engram_cli.embedded import with_running_stack
from shared.errors import InvalidEvent
from shared.events import encode, episode_adapter, turn_adapter
from shared.settings import CommonSettings
from shared.streams import Publisher

NAMESPACE = uuid.UUID("5b0c3d43-6f1e-4a53-9a55-3c1f6c0e7d21")


def derive_event_id(obj: dict[str, Any]) -> str:
    return str(uuid.uuid5(NAMESPACE, json.dumps(obj, sort_keys=True, default=str)))


def parse_line(line: str, lineno: int) -> tuple[str, bytes]:
    """Validate one line; return (stream, payload). Raises InvalidEvent with the line number."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidEvent(f"line {lineno}: not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidEvent(f"line {lineno}: expected a JSON object")
    obj.setdefault("event_id", derive_event_id(obj))
    try:
        if str(obj.get("schema", "")).startswith("episode."):
            return "episodes", encode(episode_adapter.validate_python(obj))
        return "turns", encode(turn_adapter.validate_python(obj))
    except ValidationError as exc:
        errs = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise InvalidEvent(f"line {lineno}: {errs}") from exc


async def publish_stream(settings: CommonSettings, source: TextIO, *, strict: bool) -> int:
    batches: dict[str, list[bytes]] = {"turns": [], "episodes": []}
    errors = 0
    for lineno, line in enumerate(source, 1):
        if not line.strip():
            continue
        try:
            stream, payload = parse_line(line, lineno)
        except InvalidEvent as exc:
            if strict:
                raise
            print(f"skipped {exc}", file=sys.stderr)
            errors += 1
            continue
        batches[stream].append(payload)
    redis = aioredis.from_url(settings.require_redis_url())
    try:
        publisher = Publisher(redis, settings)
        # Turns first, so an episode's close follows its turns.
        for stream in ("turns", "episodes"):
            for i in range(0, len(batches[stream]), 1000):
                await publisher.publish_raw(stream, batches[stream][i : i + 1000])
    finally:
        await redis.aclose()
    total = len(batches["turns"]) + len(batches["episodes"])
    print(
        f"published {len(batches['turns'])} turn(s) and {len(batches['episodes'])} "
        f"episode event(s)" + (f"; {errors} line(s) skipped" if errors else "")
    )
    return 1 if errors and not total else 0


def run(args: argparse.Namespace) -> int:
    settings = with_running_stack(CommonSettings())
    if args.file == "-":
        return asyncio.run(publish_stream(settings, sys.stdin, strict=args.strict))
    with open(args.file, encoding="utf-8") as f:
        return asyncio.run(publish_stream(settings, f, strict=args.strict))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("publish", help="publish JSON-lines turns / episode events")
    p.add_argument("file", nargs="?", default="-", help="a .jsonl file, or - for stdin")
    p.add_argument("--strict", action="store_true", help="stop at the first invalid line")
    p.set_defaults(func=run)
