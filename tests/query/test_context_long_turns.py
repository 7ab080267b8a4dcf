"""``/v1/context`` (auto) over long turns, on real PostgreSQL: a small budget holds
more of the hits, each cut shorter, instead of the first few long turns whole
(``auto.line_chars``, docs/context.md)."""

from __future__ import annotations

from services.query.context.auto import (
    GATHER_MIN_LINE_CHARS,
    LINE_CHARS,
    MIN_LINE_CHARS,
    assemble_auto,
    line_chars,
    turn_hits,
)
from services.query.context.command import ContextQuery
from services.query.embeddings.query import QueryVector
from tests.query.helpers import unit
from tests.retrieval.helpers import T, add_turns

Q = unit(1)
TOPICS = ["budget", "deploy", "schema", "login", "charts", "tests", "cache", "backup", "alerts"]


def _long(topic: str) -> str:
    """A user's turn of ~1,200 characters about ``topic`` (its first words name it)."""
    return f"About the {topic} work: " + f"the {topic} step needs care and review. " * 30


async def test_a_small_budget_holds_more_long_hits_each_cut_shorter(pool, user_id):
    turns = [T(_long(t), unit(10 + i, near=Q, noise=0.3 + 0.02 * i)) for i, t in enumerate(TOPICS)]
    await add_turns(pool, user_id, turns)
    qv = QueryVector(Q, "ctx-model", None)
    shown = {}
    for budget in (500, 1000, 2000):
        out = await assemble_auto(
            pool, user_id, ContextQuery(message="how is the project going", token_budget=budget), qv
        )
        assert out.tokens <= budget
        lines = [ln for ln in out.text.splitlines() if ln.startswith("- [20")]
        # every line is cut at the budget's length (its date, role and speaker aside)
        assert all(len(ln.split("] Ann: ", 1)[1]) <= line_chars(budget) for ln in lines)
        assert all(f"About the {t} work" in out.text for t in TOPICS[: len(lines)])
        shown[budget] = len(lines)
    assert line_chars(500) == line_chars(1000) == MIN_LINE_CHARS
    assert line_chars(2000) == 300 and line_chars(4000) == LINE_CHARS
    # 600-character lines fitted 5 of these in 1,000 tokens; 200-character ones fit all
    assert shown[1000] == len(TOPICS)
    assert shown[500] >= 5


async def test_a_question_that_gathers_gets_shorter_lines_and_more_of_its_turns(pool, user_id):
    """An order, a count or a summary rests on many turns: each line says what its turn
    was about (its head), and more of them fit the same budget."""
    topics = TOPICS + ["metrics", "docs", "release", "review", "billing", "search"]
    turns = [T(_long(t), unit(10 + i, near=Q, noise=0.3 + 0.02 * i)) for i, t in enumerate(topics)]
    await add_turns(pool, user_id, turns)
    qv = QueryVector(Q, "ctx-model", None)
    shown = {}
    for message in ("how is the project going", "summarize how the project progressed"):
        out = await assemble_auto(
            pool, user_id, ContextQuery(message=message, token_budget=500), qv
        )
        assert out.tokens <= 500
        lines = [ln for ln in out.text.splitlines() if ln.startswith("- [20")]
        gathers = message.startswith("summarize")
        assert all(len(ln.split("] Ann: ", 1)[1]) <= line_chars(500, gathers) for ln in lines)
        shown[gathers] = {t for t in topics if f"About the {t} work" in out.text}
    assert line_chars(1000, True) == 100 < line_chars(1000) == 200
    assert line_chars(500, True) == GATHER_MIN_LINE_CHARS < line_chars(500)
    # 200-character lines fit 8 of these in 500 tokens; 100-character ones every hit read
    assert shown[False] < shown[True] and len(shown[True]) == turn_hits(500) == 10
