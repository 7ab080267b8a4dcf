"""An episode's conversation as text for a model (Navi's transcript rules).

- user and assistant lines, ``[Tool call] name(args)`` and
  ``[Tool result] name: output`` with the output cut at 500 characters;
- the whole text at most 12,000 characters, keeping head and tail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

TOOL_OUTPUT_LIMIT = 500
TRANSCRIPT_LIMIT = 12_000
TAIL_LIMIT = 8_000  # Nous: "transcript (last 2,000 tokens)" for fact extraction

LineKind = Literal["message", "tool_call", "tool_result"]


@dataclass(frozen=True)
class Line:
    role: str
    speaker: str
    text: str
    kind: LineKind = "message"
    tool_name: str | None = None
    at: datetime | None = None
    message_id: int | None = None  # the ``messages`` row it comes from

    def render(self) -> str:
        if self.kind == "tool_call":
            return f"[Tool call] {self.tool_name}({self.text})"
        if self.kind == "tool_result":
            return f"[Tool result] {self.tool_name}: {self.text}"
        return f"{self.speaker}: {self.text}"


@dataclass
class Transcript:
    lines: list[Line] = field(default_factory=list)
    user_name: str | None = None

    @property
    def turns(self) -> int:
        """User and assistant messages (tool lines are not turns)."""
        return sum(1 for ln in self.lines if ln.kind == "message")

    def source_of(self, words: str | None) -> Line | None:
        """The message whose text holds ``words`` (a fact's source context), if any."""
        want = _normal(words or "")
        if len(want) < 8:
            return None
        for ln in self.lines:
            if ln.kind == "message" and want in _normal(ln.text):
                return ln
        return None

    def render(self, limit: int = TRANSCRIPT_LIMIT) -> str:
        return cut_middle("\n".join(ln.render() for ln in self.lines), limit)

    def tail(self, limit: int = TAIL_LIMIT) -> str:
        text = "\n".join(ln.render() for ln in self.lines)
        if len(text) <= limit:
            return text
        cut = text[-limit:]
        return "[...]\n" + cut[cut.find("\n") + 1 :] if "\n" in cut else cut


def _normal(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def cut_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` so that the result is at most ``limit`` chars."""
    if len(text) <= limit:
        return text
    marker = "\n[... {} characters omitted ...]\n"
    room = limit - len(marker.format(len(text)))
    head = room // 2
    tail = room - head
    return text[:head] + marker.format(len(text) - head - tail) + text[-tail:]


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _clip(text: str, limit: int = TOOL_OUTPUT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def from_messages(rows: Iterable[Any], *, user_name: str | None) -> Transcript:
    """Build a transcript from ``messages`` rows (id, role, content, tool_name, tool_args,
    tool_result, display_name, occurred_at), in the order given.

    An assistant message with a display name is said by that named participant (in a
    chat between two people, the other person); without one, by "Assistant". The
    user's name is the display name of the user's messages when they have one."""
    rows = list(rows)
    named = [r.get("display_name") for r in rows if r["role"] == "user" and r.get("display_name")]
    if named:
        user_name = max(set(named), key=named.count)
    lines: list[Line] = []
    for r in rows:
        role = r["role"]
        if role == "system":
            continue
        at = r.get("occurred_at")
        mid = r.get("id")
        content = (r.get("content") or "").strip()
        tool = r.get("tool_name")
        args = r.get("tool_args")
        result = r.get("tool_result")
        if role == "user":
            speaker = r.get("display_name") or user_name or "User"
            if content:
                lines.append(Line("user", speaker, content, at=at, message_id=mid))
            continue
        if role == "assistant" and content:
            name = r.get("display_name") or "Assistant"
            lines.append(Line("assistant", name, content, at=at, message_id=mid))
        if tool and args is not None:
            lines.append(Line(role, "Assistant", _clip(_as_text(args)), "tool_call", tool, at))
        if role == "tool" or (tool and result is not None):
            output = _as_text(result) if result is not None else content
            if output or tool:
                lines.append(Line("tool", "Tool", _clip(output), "tool_result", tool or "tool", at))
    return Transcript(lines=lines, user_name=user_name)
