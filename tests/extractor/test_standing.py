"""Standing instructions and preferences: the offline rule, and on real PostgreSQL the
whole way from a user's turn to the context of a later, unrelated question."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import asyncpg

from services.extractor.service import Extraction, extract_episode
from services.extractor.settings import ExtractorSettings
from services.query.context.auto import assemble_auto
from services.query.context.command import ContextQuery
from services.query.embeddings.query import QueryVector
from shared.events import ExtractRequested
from shared.llm.offline import OfflineExtractor
from shared.llm.standing import instruction_in, preference_in, standing
from shared.llm.transcript import Line, Transcript
from shared.memory.supersession import attribute_of
from shared.streams import Publisher
from tests.extractor.helpers import T0
from tests.query.helpers import LocalModel


def chat(lines: Sequence[tuple[str, str]]) -> Transcript:
    return Transcript(
        [Line(role, "Tim" if role == "user" else "Assistant", text) for role, text in lines],
        user_name="Tim",
    )


# -- the rule -------------------------------------------------------------------------


def test_instructions_are_imperatives_with_a_habit_in_the_user_s_turns() -> None:
    said = {
        "Always format all code snippets with syntax highlighting when I ask about "
        "implementation details.": "Always format all code snippets with syntax highlighting "
        "when Tim asks about implementation details.",
        "Please never use emojis in my reports.": "Never use emojis in Tim's reports.",
        "Can you keep your answers short from now on?": "Keep your answers short from now on.",
        "I want you to answer in metric units going forward.": "Answer in metric units "
        "going forward.",
    }
    for sentence, instruction in said.items():
        assert instruction_in(sentence, "Tim") == instruction, sentence
    # chit-chat that opens the same way, and one-off requests, are not instructions
    for sentence in (
        "Always up for something sweet.",
        "Never been to an animal shelter before, but it must be great!",
        "Always love having fun with friends.",
        "Don't ever quit on what you love.",
        "Please help me fix this bug in my login form.",
        "Can you show me an example with a different triangle?",
    ):
        assert instruction_in(sentence, "Tim") is None, sentence


def test_preferences_are_first_person_preference_verbs_cut_at_the_question() -> None:
    assert preference_in(
        "I'm trying to keep my app lightweight, so I prefer simple, minimal dependencies, "
        "how can I ensure that my Flask app stays minimal?",
        "Tim",
    ) == ("Tim prefers simple, minimal dependencies.")
    assert preference_in(
        "I prefer using Microsoft Word over Google Docs due to better formatting control, "
        "can you help me with that?",
        "Tim",
    ) == ("Tim prefers using Microsoft Word over Google Docs due to better formatting control.")
    assert preference_in("I'd rather use tabs than spaces when I'm coding.", "Tim") == (
        "Tim would rather use tabs than spaces when Tim is coding."
    )
    assert preference_in("Great. I prefer Celsius, by the way.", "Tim") == "Tim prefers Celsius."
    for sentence in (
        "I'm not sure if I prefer tabs or spaces.",
        "Do you think I prefer it?",
        "I prefer it.",
        "I'd rather show you a photo.",  # a choice now, not a standing one
        "I like pizza a lot.",  # a liking, not a preference stated to the assistant
    ):
        assert preference_in(sentence, "Tim") is None, sentence


def test_only_the_user_s_turns_are_read() -> None:
    t = chat(
        [
            ("assistant", "Always include tests when you ask about code. I prefer Python."),
            ("user", "Thanks! Always include version numbers when I ask about libraries."),
            ("user", "Always include version numbers when I ask about libraries."),  # again
            ("user", "By the way, I prefer dark themes over light ones."),
        ]
    )
    found = standing(t)
    assert [(f.category, f.content) for f in found] == [
        ("instruction", "Always include version numbers when Tim asks about libraries."),
        ("preference", "Tim prefers dark themes over light ones."),
    ]
    assert all(f.stated_by == "user" and f.heuristic for f in found)
    assert found[0].source_context == ("Always include version numbers when I ask about libraries.")


def test_a_reversed_instruction_or_choice_sets_the_same_attribute() -> None:
    a = attribute_of("Always use APA style when Tim asks about formatting references.")
    b = attribute_of("Always use MLA style when Tim asks about formatting references.")
    assert a and b and a[0] == b[0] == "tim: instruction: formatting references"
    assert a[1] != b[1]
    c = attribute_of("Tim prefers Microsoft Word over Google Docs due to formatting control.")
    d = attribute_of("Tim prefers Google Docs over Microsoft Word.")
    assert c and d and c[0] == d[0] and (c[1], d[1]) == ("microsoft word", "google docs")


# -- from a turn to the context, on PostgreSQL ----------------------------------------

MODEL = "all-MiniLM-L6-v2"


class Embedder(LocalModel):
    provider = "local"
    model = MODEL


FILLER = [
    "We spent the weekend hiking near the lake and the weather was lovely",
    "My sister is visiting next month, she wants to see the old harbour",
    "The new coffee place downtown makes a good flat white",
    "Work was busy, three meetings back to back this afternoon",
    "Planning to repaint the kitchen cabinets next weekend",
]


async def _episode(
    pool: asyncpg.Pool, user_id: str, n: int, lines: Sequence[tuple[str, str]]
) -> uuid.UUID:
    """A closed episode (session ``n``, ``n`` weeks after T0) with its turns."""
    episode_id = uuid.uuid4()
    at = T0 + timedelta(weeks=n)
    await pool.execute(
        "INSERT INTO users (id, display_name) VALUES ($1, 'Tim') ON CONFLICT DO NOTHING", user_id
    )
    await pool.execute(
        """INSERT INTO episodes (id, user_id, provider, chat_id, status, started_at,
                                 last_active_at, closed_at, closed_by, turn_count, extract_due)
           VALUES ($1, $2, 'test', 'c1', 'closed', $3, $3, $3, 'event', $4, true)""",
        episode_id,
        user_id,
        at,
        len(lines),
    )
    for i, (role, text) in enumerate(lines):
        await pool.execute(
            """INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role,
                                     display_name, content, occurred_at)
               VALUES ($1, $2, $3, 'test', 'c1', $4, $5, $6, $7)""",
            uuid.uuid4(),
            user_id,
            episode_id,
            role,
            "Tim" if role == "user" else None,
            text,
            at + timedelta(seconds=30 * i),
        )
    return episode_id


def _session(n: int, said: str | None = None) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []
    for i in range(6):
        lines.append(("user", f"{FILLER[(n + i) % len(FILLER)]} ({n}.{i})"))
        lines.append(("assistant", f"That sounds nice, tell me more ({n}.{i})."))
    if said:
        lines.insert(4, ("user", said))
    return lines


async def _extract(
    make_settings: Callable[..., Any],
    pool: asyncpg.Pool,
    redis: Any,
    user_id: str,
    sessions: dict[int, str | None],
) -> None:
    embedder = Embedder()

    async def embedder_for(_: str) -> Embedder:
        return embedder

    x = Extraction(
        pool=pool,
        publisher=Publisher(redis, make_settings(ExtractorSettings)),
        extractor=OfflineExtractor(),
        embedder_for=embedder_for,
        dim=384,
    )
    for n, said in sessions.items():
        episode_id = await _episode(pool, user_id, n, _session(n, said))
        outcome = await extract_episode(
            x, ExtractRequested(episode_id=episode_id, user_id=user_id, reason="manual")
        )
        assert outcome == "extracted"


async def _context(pool: asyncpg.Pool, user_id: str, question: str, budget: int) -> Any:
    [vector] = await Embedder().embed([question])
    return await assemble_auto(
        pool,
        user_id,
        ContextQuery(message=question, token_budget=budget),
        QueryVector(vector, MODEL, None),
    )


INSTRUCTION = "Always include version numbers when I ask about software libraries."


async def test_an_instruction_said_once_reaches_an_unrelated_question_sessions_later(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    other = f"{user_id}-other"
    await _extract(make_settings, pool, redis, user_id, {1: INSTRUCTION, 2: None, 3: None})
    await _extract(make_settings, pool, redis, other, {1: None, 2: None})
    [row] = await pool.fetch(
        "SELECT type, content, data, source_message_id FROM memory_items "
        "WHERE user_id = $1 AND type = 'instruction'",
        user_id,
    )
    assert row["content"] == (
        "Always include version numbers when Tim asks about software libraries."
    )
    assert row["data"]["standing"] is True and row["source_message_id"] is not None
    said = await pool.fetchval(
        "SELECT content FROM messages WHERE id = $1", row["source_message_id"]
    )
    assert said == INSTRUCTION

    # session 5 (a later chat): a question about something else entirely
    await _extract(make_settings, pool, redis, user_id, {5: None})
    question = "What should I bring to my sister's visit next month?"
    for budget in (150, 500, 1000, 2000):
        out = await _context(pool, user_id, question, budget)
        assert out.tokens <= budget
        assert [m["content"] for m in out.sections["standing"]] == [row["content"]], budget
        assert "## Standing Instructions and Preferences" in out.text
        assert row["content"] in out.text
        # shown once: not again among the memories
        assert row["content"] not in [m["content"] for m in out.sections["memories"]]
    # within its share: at 1,000 tokens the block costs at most an eighth
    out = await _context(pool, user_id, question, 1000)
    block = out.text.split("\n\n## ")[0]
    assert len(block) / 4 <= 1000 / 8 + 1

    # another user never sees it
    out = await _context(pool, other, question, 1000)
    assert out.sections["standing"] == [] and "version numbers" not in out.text


async def test_a_reversed_preference_shows_the_newest_with_what_it_replaced(
    make_settings: Callable[..., Any], pool: asyncpg.Pool, redis: Any, user_id: str
) -> None:
    await _extract(
        make_settings,
        pool,
        redis,
        user_id,
        {
            1: "I prefer Microsoft Word over Google Docs for drafting.",
            2: INSTRUCTION,
            3: "These days I prefer Google Docs over Microsoft Word for drafting.",
        },
    )
    rows = await pool.fetch(
        "SELECT id, content, superseded_by, valid_to FROM memory_items "
        "WHERE user_id = $1 AND type = 'preference' ORDER BY created_at",
        user_id,
    )
    assert [r["content"] for r in rows] == [
        "Tim prefers Microsoft Word over Google Docs for drafting.",
        "Tim prefers Google Docs over Microsoft Word for drafting.",
    ]
    old, new = rows
    assert old["superseded_by"] == new["id"] and old["valid_to"] is not None
    assert new["superseded_by"] is None

    out = await _context(pool, user_id, "Which editor should I use for my essay?", 1000)
    standing_now = {m["content"]: m for m in out.sections["standing"]}
    assert new["content"] in standing_now and old["content"] not in standing_now
    assert standing_now[new["content"]]["replaced"]["content"] == old["content"]
    [line] = [ln for ln in out.text.splitlines() if new["content"] in ln]
    when = (T0 + timedelta(weeks=3)).date().isoformat()
    assert f"(updated {when}; before: {old['content']}" in line
    # the instruction is still there, beside the preference
    assert any(m["content"].startswith("Always include version") for m in out.sections["standing"])
