"""The offline extractor, the transcript rules, secrets and relative dates (pure functions)."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from shared.dates import resolve_relative_dates
from shared.llm.offline import extract_facts, summarize
from shared.llm.transcript import Line, Transcript, from_messages
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
    assert s.key_points == [] and s.title == "Short exchange with Tim"
    assert s.summary == "Tim: Say hello in one sentence."


TWO_PEOPLE = [
    ("Melanie", "Hey Caroline, long time no talk! How have you been?"),
    ("Caroline", "Hi Mel! I went to a LGBTQ support group yesterday and it was so powerful."),
    ("Melanie", "Wow, I'm so proud of you! I ran a charity race for mental health last Saturday."),
    ("Caroline", "That's great! I'm thinking about a career in counseling. Do you paint?"),
    ("Melanie", "Yes! I painted a lake sunrise last year. Painting helps me relax after work."),
    ("Caroline", "I love that you chose painting. My goal is to give kids a loving home."),
]


def _chat(lines: list[tuple[str, str]], user: str = "Caroline") -> Transcript:
    return Transcript(
        [Line("user" if who == user else "assistant", who, text) for who, text in lines], user
    )


def test_a_summary_says_what_the_session_was_about_not_its_first_line() -> None:
    s = summarize(_chat(TWO_PEOPLE * 3))
    assert s.title.startswith("Caroline and Melanie on ")
    assert "long time" not in s.title.lower() and "hey" not in s.title.lower()
    assert len(s.title.split()) <= 10
    assert 60 <= len(s.summary.split()) <= 150
    assert s.summary.startswith("Caroline and Melanie talked about ")
    assert "Caroline went to a LGBTQ support group yesterday" in s.summary
    assert 3 <= len(s.key_points) <= 5
    assert not {"caroline", "melanie", "mel", "taking", "big", "last"} & set(s.topics)


def test_a_huge_turn_keeps_every_field_within_its_limit() -> None:
    huge = "Supercalifragilistic" * 150_000 + " and then " + "word " * 500_000  # ~5 MB
    for lines in ([("Caroline", huge)], [("Caroline", huge), ("Melanie", huge)] * 3):
        s = summarize(_chat(lines))
        assert len(s.title) <= 120 and len(s.title.split()) <= 10
        assert len(s.summary) <= 1_200 and len(s.summary.split()) <= 150
        assert all(len(p) <= 240 for p in s.key_points) and len(s.key_points) <= 5
        assert all(len(t) <= 30 for t in s.topics) and len(s.topics) <= 5
        assert len(extract_facts(_chat(lines))) <= 5


def test_facts_are_statements_about_named_people() -> None:
    facts = extract_facts(_chat(TWO_PEOPLE))
    contents = [f.content for f in facts]
    assert "Caroline went to a LGBTQ support group yesterday." in contents
    assert "Melanie ran a charity race for mental health last Saturday." in contents
    assert "Melanie painted a lake sunrise last year." in contents
    assert "Caroline's goal is to give kids a loving home." in contents
    for f in facts:
        assert "?" not in f.content
        assert not re.search(r"\b(I|me|my|you|your|we|our)\b", f.content, re.I), f.content
        assert f.source == "heuristic" and f.heuristic and f.stated_by == "user"
        assert f.source_context and f.source_context in "\n".join(t for _, t in TWO_PEOPLE)
    by = {f.content: f for f in facts}
    assert by["Melanie painted a lake sunrise last year."].subject == "Melanie"
    assert by["Melanie painted a lake sunrise last year."].about == "person"
    assert by["Caroline's goal is to give kids a loving home."].about == "user"
    assert len(facts) <= 5 and sum(f.subject == "Melanie" for f in facts) <= 3


def test_an_assistant_without_a_name_states_no_facts() -> None:
    t = Transcript(
        [
            Line("user", "Tim", "Hello there, how are you doing today?"),
            Line("assistant", "Assistant", "I ran a marathon last Saturday in Boston."),
        ],
        "Tim",
    )
    assert extract_facts(t) == []


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
    assert all(f.heuristic and f.source == "heuristic" for f in facts.values())
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


def test_a_summary_names_what_the_user_asked() -> None:
    """ "What's the weather in Silver Spring?" is all a session may say about what the
    user wanted: the summary names the question, not only its place."""
    s = summarize(
        Transcript(
            [
                Line("user", "Tim", "Hi! What's the weather in Silver Spring, MD today?"),
                Line("assistant", "Assistant", "It is 22 degrees and sunny in Silver Spring."),
                Line("user", "Tim", "Great. How are you?"),
                Line("assistant", "Assistant", "Fine, thanks. Anything else?"),
                Line("user", "Tim", "Remember that I have a dentist appointment tomorrow."),
            ],
            "Tim",
        )
    )
    assert "Tim asked: what's the weather in Silver Spring, MD today?" in s.summary
    assert "How are you" not in s.summary  # names nothing
    # the other speaker's questions are not the user's
    two = summarize(_chat(TWO_PEOPLE * 3))
    assert "Melanie asked" not in two.summary
