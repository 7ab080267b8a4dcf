"""``engram publish``: publish JSON-lines events (turns or episode events) to Redis.

Each line is one event. A line with ``"schema": "episode.started.v1"`` or
``"episode.closed.v1"`` goes to ``episodes``; anything else is a turn and goes
to ``turns``. A line without ``event_id`` gets one derived from its content, so
publishing the same file twice stores it once.

A line that does not validate is skipped: the reason is printed, the line goes to
the dead-letter list (``engram dead``) with it, and the exit status is 1 (0 with
``--allow-skipped``). ``--strict`` stops at the first such line before anything
is published, and also refuses fields the event does not know (consumers ignore
them, so an event from a newer producer is never lost). A missing file is exit 2
with a one-line message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any, TextIO

from pydantic import ValidationError

from engram_cli.embedded import with_running_stack
from shared.errors import InvalidEvent
from shared.events import encode, episode_adapter, turn_adapter, unknown_fields
from shared.redis_client import connect_redis
from shared.settings import CommonSettings
from shared.stream_registry import EPISODES, TURNS, stream_of_payload
from shared.streams import EVENT_FIELD, Publisher, dead_letter

NAMESPACE = uuid.UUID("5b0c3d43-6f1e-4a53-9a55-3c1f6c0e7d21")
MAX_DEAD_LINE_BYTES = 100_000
"""A skipped line longer than this is dead-lettered cut, and its reason says so."""


def derive_event_id(obj: dict[str, Any]) -> str:
    return str(uuid.uuid5(NAMESPACE, json.dumps(obj, sort_keys=True, default=str)))


def parse_line(line: str, lineno: int, *, strict: bool = False) -> tuple[str, bytes]:
    """Validate one line; return (stream, payload). Raises InvalidEvent with the line number.

    ``strict``: fields the event does not know are an error too."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidEvent(f"line {lineno}: not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidEvent(f"line {lineno}: expected a JSON object")
    if strict:
        unknown = unknown_fields(obj)
        if unknown:
            raise InvalidEvent(f"line {lineno}: unknown field(s): {', '.join(unknown)}")
    obj.setdefault("event_id", derive_event_id(obj))
    stream = stream_of_payload(obj)
    adapter = episode_adapter if stream == EPISODES else turn_adapter
    try:
        return stream, encode(adapter.validate_python(obj))
    except ValidationError as exc:
        errs = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise InvalidEvent(f"line {lineno}: {errs}") from exc


async def publish_stream(
    settings: CommonSettings, source: TextIO, *, strict: bool, allow_skipped: bool = False
) -> int:
    """Publish every valid line; 0 when all lines were published, else 1 (skipped lines
    are dead-lettered with their reason), or 0 with ``allow_skipped``."""
    batches: dict[str, list[bytes]] = {TURNS: [], EPISODES: []}
    skipped: list[tuple[int, str, str]] = []
    for lineno, line in enumerate(source, 1):
        if not line.strip():
            continue
        try:
            stream, payload = parse_line(line, lineno, strict=strict)
        except InvalidEvent as exc:
            if strict:
                print(f"engram publish: {exc}; nothing published (--strict)", file=sys.stderr)
                return 1
            print(f"skipped {exc}", file=sys.stderr)
            skipped.append((lineno, line.rstrip("\n"), str(exc)))
            continue
        batches[stream].append(payload)
    redis = connect_redis(settings)
    try:
        publisher = Publisher(redis, settings)
        # Turns first; ingest keeps per-chat order across the two streams either way
        # (docs/contracts.md, "Episode closes").
        for stream in (TURNS, EPISODES):
            for i in range(0, len(batches[stream]), 1000):
                await publisher.publish_raw(stream, batches[stream][i : i + 1000])
        for lineno, line, reason in skipped:
            kept = line.encode(errors="replace")
            if len(kept) > MAX_DEAD_LINE_BYTES:
                reason += f" (cut at {MAX_DEAD_LINE_BYTES:,} of {len(kept):,} bytes)"
                kept = kept[:MAX_DEAD_LINE_BYTES]
            await dead_letter(
                redis,
                settings,
                stream="",  # never published: nothing to replay it onto
                group="engram publish",
                entry_id=f"line {lineno}",
                fields={EVENT_FIELD: kept},
                error=reason,
                attempts=1,
            )
    finally:
        await redis.aclose()
    print(
        f"published {len(batches[TURNS])} turn(s) and {len(batches[EPISODES])} "
        f"episode event(s)"
        + (f"; {len(skipped)} line(s) skipped, see `engram dead`" if skipped else "")
    )
    return 1 if skipped and not allow_skipped else 0


def run(args: argparse.Namespace) -> int:
    source: TextIO
    if args.file == "-":
        source = sys.stdin
    else:
        try:
            source = open(args.file, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            print(f"engram publish: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
            return 2
    try:
        settings = with_running_stack(CommonSettings())
        return asyncio.run(
            publish_stream(settings, source, strict=args.strict, allow_skipped=args.allow_skipped)
        )
    finally:
        if source is not sys.stdin:
            source.close()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("publish", help="publish JSON-lines turns / episode events")
    p.add_argument("file", nargs="?", default="-", help="a .jsonl file, or - for stdin")
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse unknown fields too, and publish nothing if any line is invalid",
    )
    p.add_argument(
        "--allow-skipped",
        action="store_true",
        help="exit 0 even when invalid lines were skipped (they are still dead-lettered)",
    )
    p.set_defaults(func=run)
