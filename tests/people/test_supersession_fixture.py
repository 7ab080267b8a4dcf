"""The supersession rule on a labelled fixture: real PostgreSQL, the real local model.

Each pair is stored for a user of its own through the one writer (older first,
both embedded inline with all-MiniLM-L6-v2, which runs the supersession check).
Reports precision and recall of the rule next to Ash's rule alone (similarity
>= 0.75), measured on the same vectors in the same run.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from shared.memory.supersession import (
    THRESHOLD,
    can_conflict,
    check_supersession,
    worth_checking,
)
from shared.memory.writer import NewItem, insert_items
from tests.people.supersession_pairs import PAIRS


async def _store(pool, user: str, content: str, vector, model: str) -> tuple[uuid.UUID, list]:
    """Through the one writer, embedded inline: it runs the supersession check."""
    item = NewItem(type="fact", content=content, vector=vector, embedded_by=("local", model))
    async with pool.acquire() as conn:
        [written] = (await insert_items(conn, user, [item], actor="test")).items
    return written.id, list(written.superseded)


def _scores(predicted: list[bool], truth: list[bool]) -> tuple[float, float]:
    tp = sum(p and t for p, t in zip(predicted, truth, strict=True))
    fp = sum(p and not t for p, t in zip(predicted, truth, strict=True))
    fn = sum(t and not p for p, t in zip(predicted, truth, strict=True))
    return (tp / (tp + fp) if tp + fp else 1.0), (tp / (tp + fn) if tp + fn else 1.0)


async def test_supersession_means_contradiction(pool, local_model, capsys) -> None:
    assert len(PAIRS) >= 60
    texts = sorted({t for a, b, _ in PAIRS for t in (a, b)})
    vectors = dict(zip(texts, await local_model.embed(texts), strict=True))
    ours: list[bool] = []
    ash: list[bool] = []
    truth: list[bool] = []
    wrong: list[str] = []
    for older, newer, contradicts in PAIRS:
        user = f"pair-{uuid.uuid4().hex[:10]}"
        old_id, _ = await _store(pool, user, older, vectors[older], local_model.model)
        new_id, marked = await _store(pool, user, newer, vectors[newer], local_model.model)
        async with pool.acquire() as conn:
            assert await check_supersession(conn, new_id) == []  # idempotent
        assert set(marked) <= {old_id}
        superseded = marked == [old_id]
        if superseded:
            row = await pool.fetchrow(
                "SELECT superseded_by FROM memory_items WHERE id = $1", old_id
            )
            assert row["superseded_by"] == new_id
        similarity = float(np.dot(vectors[older], vectors[newer]))
        ours.append(superseded)
        ash.append(similarity >= THRESHOLD)
        truth.append(contradicts)
        if superseded != contradicts:
            wrong.append(f"{similarity:.2f} {older!r} -> {newer!r} (expected {contradicts})")
    precision, recall = _scores(ours, truth)
    ash_precision, ash_recall = _scores(ash, truth)
    with capsys.disabled():
        print(
            f"\nsupersession fixture: {sum(truth)} contradictions, "
            f"{len(truth) - sum(truth)} compatible pairs\n"
            f"  same attribute (this rule): precision {precision:.3f} recall {recall:.3f}\n"
            f"  similarity >= 0.75 only:    precision {ash_precision:.3f} recall {ash_recall:.3f}"
        )
        for line in wrong:
            print("  wrong:", line)
    assert precision >= 0.95 and recall >= 0.80


@pytest.mark.parametrize(
    "older,newer",
    [("Tim lives in Paris", "Tim lives in Berlin")],
)
async def test_different_subjects_never_conflict_even_on_one_attribute(
    pool, local_model, older: str, newer: str
) -> None:
    user = f"pair-{uuid.uuid4().hex[:10]}"
    await pool.execute("INSERT INTO users (id) VALUES ($1)", user)
    person = await pool.fetchval(
        "INSERT INTO people (user_id, name) VALUES ($1, 'Sam') RETURNING id", user
    )
    a, b = await local_model.embed([older, newer])
    await _store(pool, user, older, a, local_model.model)
    item = NewItem(
        type="fact",
        content=newer,
        vector=b,
        embedded_by=("local", local_model.model),
        subjects=[person],
    )
    async with pool.acquire() as conn:
        [written] = (await insert_items(conn, user, [item], actor="test")).items
    assert written.superseded == ()


async def test_only_memories_that_set_an_attribute_are_checked_without_a_model(pool) -> None:
    """With no model to ask, a memory that sets no attribute can neither replace nor be
    replaced (``conflict`` needs both attributes): the consumer reads the wording of a
    batch once and skips the check (a lock and a scan of the owner's vectors) for it."""
    user = f"worth-{uuid.uuid4().hex[:10]}"
    contents = [
        "The user's favourite colour is blue",
        "Went to a support group on Tuesday",
        "Tim lives in Paris",
        "Had a long chat with an old friend",
    ]
    items = [NewItem(type="fact", content=c) for c in contents]
    async with pool.acquire() as conn:
        ids = [w.id for w in (await insert_items(conn, user, items, actor="test")).items]
        assert await worth_checking(conn, ids) == [ids[0], ids[2]]

        async def ask(older: str, newer: str) -> bool | None:
            return None

        assert await worth_checking(conn, ids, ask) == ids
        assert not can_conflict(contents[1], None)
        assert can_conflict(contents[1], ask)
