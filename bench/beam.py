"""BEAM's chats in the shape of the LoCoMo benches: a second tuning set.

    python -m bench.locomo --dataset beam PATH/TO/BEAM/chats/100K
    python -m bench.context --quality --dataset beam PATH/TO/BEAM/chats/100K

BEAM (Tavakoli et al., ICLR 2026; github.com/mohammadtavakoli78/BEAM) is a set of
long chats between one user and an assistant: a project worked on over months,
its deadlines and changing numbers. The repository carries no license: it is read
from its path, never copied into this one. A tier's directory holds
``<n>/chat.json`` and ``<n>/probing_questions/probing_questions.json``; this bench
reads chats 1-10 only (1-5 tune, 6-10 check: :func:`bench.locomo.halves` over the
sample ids ``beam-01`` ... ``beam-10``). Chats 11-20 and the other tiers are held
out: :func:`load` refuses them.

The conversion:

- a conversation per chat (engram user ``beam-<nn>``), a session per BEAM batch,
  dated by the ``time_anchor`` its first message carries (``March-15-2024``); the
  batch's messages follow it one second apart, so they keep their order;
- a turn per message, its id ``D<batch>:<message id>`` (the LoCoMo form, so a
  turn's session reads off its id), speaker ``User`` or ``Assistant`` with the
  roles ``user`` and ``assistant``; the generator's index marker ending a user
  message (``->-> 1,1``) is dropped, as LoCoMo's annotations are;
- a message longer than a turn may be (``shared.events.MAX_TURN_CHARS``, 1,000,000
  characters; none of chats 1-10 is: chat 4's message 97, 348,853 characters,
  mostly spaces, is one turn) is sent as consecutive turns of at most that many
  characters, ids ``D<batch>:<id>#<k>`` (the burst form's pieces: any piece found
  counts as the message found), never dropped;
- a question per probing question that names evidence (``source_chat_ids``: a
  list, nested lists, or a dict of lists such as ``original_info`` and
  ``updated_info``): its evidence is the message ids named; its category BEAM's
  question type (:data:`CATEGORIES`). ``abstention`` questions name none (their
  answer is not in the chat) and are left out, as LoCoMo's questions without
  evidence are.

The system never sees the answers, rubrics or evidence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from shared.events import MAX_TURN_CHARS

CHATS = range(1, 11)
"""The chats this bench may read; 11-20 and the other tiers are held out."""

CATEGORIES = {
    1: "information_extraction",
    2: "multi_session_reasoning",
    3: "knowledge_update",
    4: "temporal_reasoning",
    5: "event_ordering",
    6: "contradiction_resolution",
    7: "instruction_following",
    8: "preference_following",
    9: "summarization",
    10: "abstention",
}
CATEGORY_OF = {name: n for n, name in CATEGORIES.items()}

USER, ASSISTANT = "User", "Assistant"
PIECE = "#"
_MARKER = re.compile(r"\s*->->\s*\d+\s*,\s*\d+\s*$")


@dataclass(frozen=True)
class Message:
    batch: int
    id: int
    role: str
    text: str


def chat_dirs(root: Path, chats: range | list[int] = CHATS) -> list[tuple[int, Path]]:
    held_out = [n for n in chats if n not in CHATS]
    if held_out:
        raise ValueError(f"BEAM chats {held_out} are held out; this bench reads 1-10 only")
    return [(n, root / str(n)) for n in chats]


def anchor(text: str) -> datetime:
    """``March-15-2024`` as midnight UTC of that day."""
    return datetime.strptime(text.strip(), "%B-%d-%Y").replace(tzinfo=UTC)


def messages(chat: list[dict[str, Any]]) -> list[tuple[datetime, list[Message]]]:
    """Each batch's start and its messages, in order."""
    out = []
    last = None
    for batch in chat:
        n = int(batch["batch_number"])
        msgs = [m for turn in batch["turns"] for m in turn]
        anchors = [m["time_anchor"] for m in msgs if m.get("time_anchor")]
        if anchors:
            start = anchor(anchors[0])
        elif last is not None:  # no anchor: the day after the last batch
            start = last + timedelta(days=1)
        else:
            raise ValueError(f"batch {n}: no time_anchor to date it by")
        last = start
        out.append(
            (
                start,
                [Message(n, int(m["id"]), m["role"], unmarked(m["content"])) for m in msgs],
            )
        )
    return out


def unmarked(text: str) -> str:
    """``text`` without the generator's ``->-> 1,1`` at its end (looked for in the last
    40 characters only: a regular expression run over a whole message of 300,000
    spaces backtracks for minutes)."""
    m = _MARKER.search(text, max(0, len(text) - 40))
    return text[: m.start()] if m else text


def pieces(text: str, limit: int = MAX_TURN_CHARS) -> list[str]:
    """``text`` cut into consecutive parts of at most ``limit`` characters, each
    cut at the last whitespace before the limit when there is one (the parts
    joined give the text back)."""
    out = []
    while len(text) > limit:
        cut = max(text.rfind(" ", 0, limit), text.rfind("\n", 0, limit))
        cut = cut + 1 if cut > 0 else limit
        out.append(text[:cut])
        text = text[cut:]
    return [*out, text]


def evidence_ids(raw: Any) -> list[int]:
    """Message ids from ``source_chat_ids`` however it nests them."""
    if isinstance(raw, bool) or raw is None:
        return []
    if isinstance(raw, int):
        return [raw]
    if isinstance(raw, str):
        return [int(x) for x in re.findall(r"\d+", raw)]
    if isinstance(raw, dict):
        return [i for v in raw.values() for i in evidence_ids(v)]
    if isinstance(raw, list):
        return [i for v in raw for i in evidence_ids(v)]
    return []


def load(root: Path, chats: range | list[int] = CHATS) -> list[Any]:
    """The chats as :class:`bench.locomo.Conversation` (user ``beam-<nn>``)."""
    from bench.locomo import Conversation, Question, Turn

    convs = []
    for n, where in chat_dirs(root, chats):
        chat = json.loads((where / "chat.json").read_text())
        probing = json.loads((where / "probing_questions" / "probing_questions.json").read_text())
        conv = Conversation(f"{n:02d}", USER, dataset="beam")
        dia: dict[int, str] = {}
        for start, msgs in messages(chat):
            step = 0
            for m in msgs:
                dia[m.id] = f"D{m.batch}:{m.id}"
                speaker = USER if m.role == "user" else ASSISTANT
                parts = pieces(m.text)
                for k, part in enumerate(parts):
                    turn_id = dia[m.id] if len(parts) == 1 else f"{dia[m.id]}{PIECE}{k}"
                    conv.turns.append(Turn(turn_id, speaker, part, start + timedelta(seconds=step)))
                    step += 1
        for kind, qs in probing.items():
            if kind not in CATEGORY_OF:
                raise ValueError(f"chat {n}: unknown question type {kind!r}")
            for q in qs:
                ids = evidence_ids(q.get("source_chat_ids"))
                missing = [i for i in ids if i not in dia]
                if missing:
                    raise ValueError(f"chat {n}: {kind} names messages {missing} it lacks")
                if ids:
                    evidence = frozenset(dia[i] for i in ids)
                    conv.questions.append(Question(q["question"], CATEGORY_OF[kind], evidence))
        convs.append(conv)
    return convs
