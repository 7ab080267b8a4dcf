"""bench/beam.py: BEAM's layout read as the LoCoMo benches' conversations (a made-up
chat in BEAM's shape; the data itself is never in the repository)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import beam
from bench.locomo import dataset, halves, turn_of
from shared.events import MAX_TURN_CHARS


def _chat(root: Path, n: int, *, huge: int = 0) -> None:
    msgs = [
        {"role": "user", "id": 0, "time_anchor": "March-15-2024", "content": "Plan it? ->-> 1,1"},
        {"role": "assistant", "id": 1, "content": "Sure." + " " * huge},
    ]
    later = [
        {"role": "user", "id": 2, "time_anchor": "April-05-2024", "content": "Deadline moved."},
        {"role": "assistant", "id": 3, "content": "Noted."},
    ]
    chat = [
        {"batch_number": 1, "time_anchor": None, "turns": [msgs]},
        {"batch_number": 2, "time_anchor": None, "turns": [later]},
    ]
    probing = {
        "abstention": [{"question": "Unknowable?"}],
        "knowledge_update": [
            {
                "question": "When is the deadline?",
                "source_chat_ids": {"original_info": [0], "updated_info": [2]},
            }
        ],
        "event_ordering": [{"question": "In what order?", "source_chat_ids": [0, [1, 3]]}],
    }
    (root / str(n) / "probing_questions").mkdir(parents=True)
    (root / str(n) / "chat.json").write_text(json.dumps(chat))
    (root / str(n) / "probing_questions" / "probing_questions.json").write_text(json.dumps(probing))


def test_batches_become_dated_sessions_and_evidence_the_named_messages(tmp_path: Path) -> None:
    _chat(tmp_path, 1)
    [conv] = beam.load(tmp_path, [1])
    assert conv.user_id == "beam-01" and conv.sample_id == "01"
    assert [t.dia_id for t in conv.turns] == ["D1:0", "D1:1", "D2:2", "D2:3"]
    assert conv.turns[0].text == "Plan it?"  # the generator's marker dropped
    assert conv.turns[0].when == datetime(2024, 3, 15, tzinfo=UTC)
    assert conv.turns[3].when == datetime(2024, 4, 5, 0, 0, 1, tzinfo=UTC)
    assert [t.speaker for t in conv.turns[:2]] == [beam.USER, beam.ASSISTANT]
    # abstention names no evidence: left out
    update, order = conv.questions
    assert beam.CATEGORIES[update.category] == "knowledge_update"
    assert update.evidence == {"D1:0", "D2:2"}
    assert order.evidence == {"D1:0", "D1:1", "D2:3"}


def test_a_message_longer_than_a_turn_is_sent_in_pieces_never_dropped(tmp_path: Path) -> None:
    _chat(tmp_path, 1, huge=MAX_TURN_CHARS * 2)
    [conv] = beam.load(tmp_path, [1])
    pieces = [t for t in conv.turns if turn_of(t.dia_id) == "D1:1"]
    assert len(pieces) == 3 and all(len(t.text) <= MAX_TURN_CHARS for t in pieces)
    assert "".join(t.text for t in pieces) == "Sure." + " " * (MAX_TURN_CHARS * 2)
    assert [t.dia_id for t in pieces] == ["D1:1#0", "D1:1#1", "D1:1#2"]


def test_held_out_chats_are_refused_and_halves_split_by_chat(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="held out"):
        beam.load(tmp_path, [11])
    for n in range(1, 11):
        _chat(tmp_path, n)
    convs = dataset("beam").load(tmp_path)
    half = halves(convs)
    assert [half[c.sample_id] for c in convs] == ["tune"] * 5 + ["check"] * 5
