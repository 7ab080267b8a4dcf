"""The duplicate rule on a labelled fixture, with the real local model and no language
model (what the offline rule catches, measured): every pair is stored for a user of its
own through the one writer (both embedded inline, which runs the duplicate check).

Reports, per similarity band, how many same-fact pairs become one memory and how many
different-fact pairs are wrongly merged, next to Nous's rule alone (similarity >= 0.90).
"""

from __future__ import annotations

import uuid

import numpy as np

from shared.memory.dedupe import ASK, CONFIRM, SAME_WORDS
from shared.memory.writer import NewItem, insert_items
from tests.people.dedupe_pairs import DIFFERENT, SAME


async def _store(pool, user: str, content: str, vector, model: str):
    item = NewItem(type="fact", content=content, vector=vector, embedded_by=("local", model))
    async with pool.acquire() as conn:
        [written] = (await insert_items(conn, user, [item], actor="test")).items
    return written


def _band(similarity: float) -> str:
    if similarity >= CONFIRM:
        return f">={CONFIRM}"
    if similarity >= ASK:
        return f"{ASK}-{CONFIRM}"
    if similarity >= SAME_WORDS:
        return f"{SAME_WORDS}-{ASK}"
    return f"<{SAME_WORDS}"


async def test_the_offline_rule_merges_paraphrases_and_never_different_facts(
    pool, local_model, capsys
) -> None:
    pairs = [(a, b, True) for a, b in SAME] + [(a, b, False) for a, b in DIFFERENT]
    texts = sorted({t for a, b, _ in pairs for t in (a, b)})
    vectors = dict(zip(texts, await local_model.embed(texts), strict=True))
    table: dict[tuple[str, bool], list[int]] = {}
    merged_wrongly: list[str] = []
    missed: list[str] = []
    nous_hits = 0
    for first, second, same in pairs:
        user = f"dup-{uuid.uuid4().hex[:10]}"
        one = await _store(pool, user, first, vectors[first], local_model.model)
        two = await _store(pool, user, second, vectors[second], local_model.model)
        merged = two.confirmed and two.id == one.id
        similarity = float(np.dot(vectors[first], vectors[second]))
        nous_hits += same and similarity >= CONFIRM
        cell = table.setdefault((_band(similarity), same), [0, 0])
        cell[0] += merged
        cell[1] += 1
        if merged and not same:
            merged_wrongly.append(f"{similarity:.3f} {first!r} / {second!r}")
        if same and not merged:
            missed.append(f"{similarity:.3f} {first!r} / {second!r}")
        if merged:  # the survivor counts it; the other left retrieval with an audit line
            row = await pool.fetchrow(
                "SELECT confirmations FROM memory_items WHERE id = $1", one.id
            )
            assert row["confirmations"] == 1
    caught = sum(v[0] for (_, same), v in table.items() if same)
    with capsys.disabled():
        print(f"\nduplicate rule, local model, no language model ({len(pairs)} pairs):")
        for (band, same), (m, n) in sorted(table.items()):
            print(f"  {band:>10} {'same' if same else 'different':>9}: merged {m}/{n}")
        print(f"  same-fact pairs merged: {caught}/{len(SAME)} (Nous >=0.90 alone: {nous_hits})")
        print(f"  different-fact pairs merged: {len(merged_wrongly)}/{len(DIFFERENT)}")
        print("  not merged:", *missed, sep="\n    ")
    assert merged_wrongly == []
    assert caught >= 0.9 * len(SAME)
