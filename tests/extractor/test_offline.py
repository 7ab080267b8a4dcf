"""The offline extractor, the transcript rules, secrets and relative dates (pure functions)."""

from __future__ import annotations

from datetime import datetime

import pytest

from shared.llm.offline import extract_facts, summarize
from shared.llm.transcript import Line, Transcript, from_messages
from shared.memory.dates import resolve_relative_dates
from shared.memory.people import parse_reference
from shared.memory.secrets import find_secret, redact


def test_tool_lines_and_the_500_character_cut() -> None:
    t = from_messages(
        [
            {"role": "user", "content": "weather?", "display_name": "Tim"},
            {
                "role": "assistant",
                "content": "",
                "tool_name": "get_weather",
                "tool_args": {"city": "Silver Spring"},
            },
            {"role": "tool", "content": "", "tool_name": "get_weather", "tool_result": "x" * 900},
            {"role": "system", "content": "hidden"},
        ],
        user_name="Tim",
    )
    text = t.render()
    assert text.splitlines()[0] == "Tim: weather?"
    assert text.splitlines()[1] == '[Tool call] get_weather({"city":"Silver Spring"})'
    result = text.splitlines()[2]
    assert result.startswith("[Tool result] get_weather: xxx") and len(result) < 540
    assert "hidden" not in text and t.turns == 1


def test_long_transcripts_keep_head_and_tail_within_12000() -> None:
    lines = [Line("user", "Tim", f"message {i} " + "word " * 40) for i in range(400)]
    text = Transcript(lines).render()
    assert len(text) <= 12_000
    assert text.startswith("Tim: message 0 ") and "message 399" in text
    assert "characters omitted" in text and "message 200 " not in text


def test_a_short_conversation_gets_a_minimal_summary() -> None:
    s = summarize(Transcript([Line("user", "Tim", "Say hello in one sentence.")], "Tim"))
    assert s.key_points == [] and s.title == "Say hello in one sentence."
    assert s.summary == "Tim: Say hello in one sentence."


def test_patterns_only_read_the_users_lines() -> None:
    t = Transcript(
        [
            Line("user", "Tim", "Call me Timmy. I hate cilantro. Do I like jazz?"),
            Line("assistant", "Assistant", "I like jazz. My favorite color is green."),
            Line("user", "Tim", "My favorite editor is Neovim. I think I prefer tea."),
        ],
        "Tim",
    )
    facts = {f.content: f for f in extract_facts(t)}
    assert set(facts) == {
        "Tim prefers to be called Timmy.",
        "Tim hates cilantro.",
        "Tim's favorite editor is Neovim.",
        "Tim prefers tea.",
    }
    assert all(f.heuristic for f in facts.values())
    assert facts["Tim prefers tea."].confidence == 0.5  # hedged: goes to review
    assert facts["Tim hates cilantro."].confidence < 0.9


@pytest.mark.parametrize(
    "text",
    [
        "my token is ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "password: hunter2",
        "the api key is sk-abcdefghijklmnopqrstuv",
        "card 4111-1111-1111-1111",
        "AKIAABCDEFGHIJKLMNOP",
    ],
)
def test_secrets_are_found_and_redacted(text: str) -> None:
    assert find_secret(text) is not None
    assert find_secret(redact(text)) is None


@pytest.mark.parametrize(
    "text",
    [
        "I forgot my password yesterday",
        "Tim prefers Celsius",
        "call 555-1234",
        "order 1234 5678",
    ],
)
def test_ordinary_text_is_not_a_secret(text: str) -> None:
    assert find_secret(text) is None


@pytest.mark.parametrize(
    "text,expected",
    [
        ("went to Paris yesterday", "went to Paris on 7 May 2023"),
        ("starts a new job next week", "starts a new job during the week of 15 May 2023"),
        ("met Sam two days ago", "met Sam on 6 May 2023"),
        ("since last Friday", "since 5 May 2023"),
        ("graduated last year", "graduated in 2022"),
    ],
)
def test_relative_dates(text: str, expected: str) -> None:
    assert resolve_relative_dates(text, datetime(2023, 5, 8, 13, 56)) == expected


@pytest.mark.parametrize(
    "ref,expected",
    [
        ("my wife", (None, "wife")),
        ("Sarah", ("Sarah", None)),
        ("my wife Sarah", ("Sarah", "wife")),
        ("my best friend Sam Lee", ("Sam Lee", "best friend")),
    ],
)
def test_person_references(ref: str, expected: tuple[str | None, str | None]) -> None:
    assert parse_reference(ref) == expected


def test_a_name_can_come_from_the_content() -> None:
    assert parse_reference("my wife", "my wife's name is Sarah") == ("Sarah", "wife")
