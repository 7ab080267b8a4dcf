"""Fitting context into a token budget.

Tokens are estimated as one per four characters (rounded up), the usual rule of
thumb for English with GPT-style tokenizers; it needs no tokenizer and errs on
the generous side for short words.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass
class Block:
    """A titled list of lines; lines are in priority order (best first)."""

    name: str
    header: str
    lines: list[str]
    footer: str = ""


@dataclass
class Fitted:
    text: str
    tokens: int
    kept: dict[str, list[int]] = field(default_factory=dict)
    """Indexes of the lines kept, by block name."""
    dropped: int = 0


def fit_blocks(blocks: list[Block], budget: int) -> Fitted:
    """Take lines block by block, in order, while the text stays within ``budget``.

    A block's header (and footer) is spent only when at least one of its lines
    fits; a line that does not fit is dropped and later, shorter ones may still
    fit. Blocks keep their order in the text."""
    used = 0
    parts: list[str] = []
    kept: dict[str, list[int]] = {}
    dropped = 0
    for block in blocks:
        frame = tokens(block.header) + tokens(block.footer) + 1
        taken: list[str] = []
        kept[block.name] = []
        for i, line in enumerate(block.lines):
            cost = tokens(line) + 1 + (0 if taken else frame)
            if used + cost <= budget:
                taken.append(line)
                kept[block.name].append(i)
                used += cost
            else:
                dropped += 1
        if taken:
            body = "\n".join([block.header, *taken] + ([block.footer] if block.footer else []))
            parts.append(body)
    text = "\n\n".join(parts)
    return Fitted(text=text, tokens=tokens(text), kept=kept, dropped=dropped)


def fit_by_priority(
    blocks: list[Block],
    budget: int,
    priority: list[tuple[str, int]],
    *,
    caps: dict[str, int] | None = None,
) -> Fitted:
    """Spend ``budget`` on lines in ``priority`` order (``(block name, line index)``),
    each block within its cap in ``caps`` (tokens, header included); the text keeps
    the blocks' order and each block's line order.

    So the layout (which block comes first in the text) and the allocation (which
    line gets the budget first) are two separate decisions. A line that does not
    fit is dropped and later, shorter ones may still fit."""
    caps = caps or {}
    by_name = {b.name: b for b in blocks}
    used = 0
    spent: dict[str, int] = dict.fromkeys(by_name, 0)
    kept: dict[str, list[int]] = {b.name: [] for b in blocks}
    dropped = 0
    for name, i in priority:
        block = by_name[name]
        frame = 0 if kept[name] else tokens(block.header) + tokens(block.footer) + 1
        cost = tokens(block.lines[i]) + 1 + frame
        cap = caps.get(name)
        if used + cost <= budget and (cap is None or spent[name] + cost <= cap):
            kept[name].append(i)
            used += cost
            spent[name] += cost
        else:
            dropped += 1
    parts = []
    for block in blocks:
        lines = [block.lines[i] for i in sorted(kept[block.name])]
        if lines:
            parts.append(
                "\n".join([block.header, *lines] + ([block.footer] if block.footer else []))
            )
        kept[block.name].sort()
    text = "\n\n".join(parts)
    return Fitted(text=text, tokens=tokens(text), kept=kept, dropped=dropped)
