"""Ash's automatic context: relevant past turns, relevant memories, known people.

- past turns from the same ranking as ``/v1/messages/search`` (``fused``), with
  Ash's 0.3 similarity floor on its semantic side (``CONTEXT_TURNS``): one hit
  per 60 tokens of budget (10 to 30) found by a signal (or the answer right
  after a found question), the message itself left out; each line names its
  date, role and speaker, and a hit that is a question or a short turn brings the
  turns around it;
- the top 10 visible memories (Ash's recall ranking, ``ASH_RECALL``), those
  relevant to the message (cosine >= 0.3 or a shared word) first, each
  attributed ("[Memory (about Sarah)] ..."; shared ones and non-user sources
  say so);
- the known-people block;
laid out people, memories, turns; the token budget is spent by relevance, not
by layout (docs/context.md): people first (at most a fifth of the budget, but
always the first), then
the turn hits best first, then the relevant memories best first, then the
turns around the hits, and only then (Ash: "top N memory entries regardless of
similarity") the other memories. A block of weakly related memories can never
push a turn hit out, and no longer opens every context.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from services.query.context.budget import Block, fit_by_priority, tokens
from services.query.context.command import ContextQuery
from services.query.context.models import ContextOut
from services.query.context.standing import (
    STANDING_READ,
    STANDING_TYPES,
    standing_block,
    standing_cap,
    standing_of,
)
from services.query.embeddings.query import QueryVector, lists_newest
from services.query.people.subjects import subject_people
from services.query.ranking.fusion import CONTEXT_TURNS
from services.query.ranking.recall import MemoryHit, is_member, search_memories
from services.query.ranking.turns import MessageHit, rank_turns
from shared.dates import asks_across, asks_order
from shared.db import Executor
from shared.memory.people import Person, list_people
from shared.memory.writer import MEMORY_TYPES
from shared.text import one_line

# turn hits read: one per 60 tokens of budget, at least 10, at most 30
MIN_MESSAGES, MAX_MESSAGES, TOKENS_PER_MESSAGE = 10, 30, 60
MAX_MEMORIES = 10
# Observations (consolidation's restatements of memories) are not in the context's
# memories: adding them was not measured with bench.context --quality (docs/retrieval.md).
CONTEXT_TYPES = [t for t in MEMORY_TYPES if t != "observation"]
MIN_MESSAGE_SIMILARITY = CONTEXT_TURNS.min_similarity
LINE_CHARS = 600
# a past turn's line is cut at this share of the budget in characters (between
# MIN_LINE_CHARS and LINE_CHARS): 200 characters up to 1,333 tokens, 300 at 2,000, so
# a small budget holds more of the hits than the first few long turns (docs/context.md)
LINE_SHARE, MIN_LINE_CHARS = 0.15, 200
# ... and for a question that gathers over the history (``shared.dates.asks_across``:
# an order, a count, a summary), breadth before depth: 0.1 a token, at least 100 (100
# at 1,000 tokens, 200 at 2,000): each line says what a turn was about, and more of
# the many turns such a question rests on fit (docs/context.md)
GATHER_LINE_SHARE, GATHER_MIN_LINE_CHARS = 0.1, 100
PEOPLE_SHARE = 5  # known people take at most 1 / PEOPLE_SHARE of the budget
# a hit with fewer words than this brings the turns before and after it
SHORT_WORDS = 8
ROLES = ("user", "assistant")

AROUND = """
SELECT h.id AS hit, n.id, n.role, n.display_name, n.content, n.occurred_at, n.after
FROM unnest($2::bigint[]) AS h(id)
JOIN messages t ON t.id = h.id AND t.user_id = $1
CROSS JOIN LATERAL (
    (SELECT m.id, m.role, m.display_name, m.content, m.occurred_at, false AS after
     FROM messages m
     WHERE m.episode_id = t.episode_id AND m.user_id = $1
       AND (m.occurred_at, m.id) < (t.occurred_at, t.id)
     ORDER BY m.occurred_at DESC, m.id DESC LIMIT 1)
    UNION ALL
    (SELECT m.id, m.role, m.display_name, m.content, m.occurred_at, true
     FROM messages m
     WHERE m.episode_id = t.episode_id AND m.user_id = $1
       AND (m.occurred_at, m.id) > (t.occurred_at, t.id)
     ORDER BY m.occurred_at, m.id LIMIT 1)
) AS n
"""


@dataclass(frozen=True)
class Turn:
    """A line of the past-messages block: a hit, or a turn next to one."""

    id: int
    role: str
    display_name: str | None
    content: str
    chat_id: str
    occurred_at: datetime
    similarity: float | None
    neighbour_of: int | None = None


def line_chars(budget: int, gathers: bool = False) -> int:
    """How long a past turn's line may be under ``budget`` tokens (shorter when the
    question ``gathers`` over the history)."""
    if gathers:
        return max(GATHER_MIN_LINE_CHARS, min(LINE_CHARS, int(budget * GATHER_LINE_SHARE)))
    return max(MIN_LINE_CHARS, min(LINE_CHARS, int(budget * LINE_SHARE)))


def people_block(people: list[Person]) -> Block:
    lines = []
    for p in people:
        if p.name and p.relation:
            lines.append(f"- **{p.name}** ({p.relation})")
        elif p.name:
            lines.append(f"- **{p.name}**")
        else:
            lines.append(f"- the user's {p.relation} (name unknown)")
    return Block(
        name="known_people",
        header="## Known People\n\nThe user has told you about these people:\n",
        lines=lines,
        footer="\nUse these when interpreting references like 'my wife' or 'Sarah'.",
    )


def memory_label(hit: MemoryHit, people: dict[uuid.UUID, Person]) -> str:
    """ "[Memory (about Sarah)]", "[Shared memory]", "[Memory from extraction (about ...)]"."""
    label = "Shared memory" if hit.scope == "chat" else "Memory"
    if hit.source and hit.source not in ("user", "api"):
        label += f" from {hit.source}"
    names = [people[s].label for s in hit.subjects if s in people]
    if names:
        label += f" (about {', '.join(names)})"
    if hit.source_turn is not None:  # learned from a turn: when it was said
        label += f", said {hit.source_turn.occurred_at.date().isoformat()}"
    return f"[{label}]"


def memory_text(hit: MemoryHit) -> str:
    """A memory's line text; one that replaced an earlier value says which and when
    ("... (updated 2024-05-10; before: deadline is 1 June, from 2024-04-02)"), so the
    newest is read as the newest, not beside the old as an equal."""
    text = one_line(hit.content, LINE_CHARS)
    old = hit.replaced
    if old is None:
        return text
    since = hit.valid_from.date().isoformat() if hit.valid_from else "later"
    held = f", from {old.valid_from.date().isoformat()}" if old.valid_from else ""
    return f"{text} (updated {since}; before: {one_line(old.content, LINE_CHARS)}{held})"


def in_time_order(
    turns: list[Turn], order: list[tuple[str, int]]
) -> tuple[list[Turn], list[tuple[str, int]]]:
    """The turns oldest first, and the budget's order renumbered to match (the budget
    is still spent by relevance; only the layout follows time)."""
    by_time = sorted(range(len(turns)), key=lambda i: (turns[i].occurred_at, turns[i].id))
    new = {old: n for n, old in enumerate(by_time)}
    renumbered = [(name, new[i]) if name == "messages" else (name, i) for name, i in order]
    return [turns[i] for i in by_time], renumbered


def message_line(turn: Turn, note: str = "", limit: int = LINE_CHARS) -> str:
    """``- [2023-05-08, user] Caroline: ...`` (its date, its role: what the user said
    or an assistant's answer; the block's heading says these are past messages, and
    the shorter head left more of a small budget to the turns, docs/context.md); a
    turn next to a hit is indented under it; ``note`` says when a later turn replaced
    what it says."""
    when = turn.occurred_at.date().isoformat()
    who = f"{turn.display_name}: " if turn.display_name else ""
    indent = "  " if turn.neighbour_of is not None else ""
    text = f"{indent}- [{when}, {turn.role}] {who}{one_line(turn.content, limit)}"
    return f"{text} {note}" if note else text


def updates(turns: list[Turn], memories: list[MemoryHit]) -> tuple[list[Turn], dict[int, str]]:
    """Turns whose value a later turn replaced (a memory learned from the later one
    superseded the one learned from the earlier): the later turn is moved just above
    the earlier one if it ranked below it, and the earlier one is marked
    "[replaced on <date>]", so the newest reads as the newest, not as an equal."""
    groups: list[list[Turn]] = []  # a hit with the turns shown around it
    for t in turns:
        key = t.neighbour_of if t.neighbour_of is not None else t.id
        if groups and (groups[-1][0].neighbour_of or groups[-1][0].id) == key:
            groups[-1].append(t)
        else:
            groups.append([t])

    def place(turn_id: int) -> int | None:
        for n, g in enumerate(groups):
            if any(t.id == turn_id and t.neighbour_of is None for t in g):
                return n
        return None

    notes: dict[int, str] = {}
    for m in memories:
        old = m.replaced.source_message_id if m.replaced else None
        if old is None or m.source_turn is None or place(old) is None:
            continue
        notes[old] = f"[replaced on {m.source_turn.occurred_at.date().isoformat()}]"
        o, n = place(old), place(m.source_turn.id)
        if o is not None and n is not None and n > o:
            groups.insert(o, groups.pop(n))
    return [t for g in groups for t in g], notes


def serves(hit: MessageHit) -> bool:
    """Whether the turns around a hit help read it: a question (its answer follows)
    or a short turn ("yes, in May!")."""
    return hit.content.rstrip().endswith("?") or len(hit.content.split()) < SHORT_WORDS


def turn_hits(budget: int) -> int:
    """How many turn hits a budget reads (each line costs ~30-100 tokens)."""
    return max(MIN_MESSAGES, min(MAX_MESSAGES, budget // TOKENS_PER_MESSAGE))


async def past_turns(
    conn: Executor,
    user_id: str,
    message: str,
    qv: QueryVector,
    *,
    limit: int = MIN_MESSAGES,
    as_of: datetime | None = None,
) -> list[Turn]:
    """The turn hits for ``message``, each followed by the turns around it when
    that serves (see ``serves``), without repeats."""
    hits = await rank_turns(
        conn,
        CONTEXT_TURNS,
        user_id=user_id,
        query=message,
        vector=qv.vector,
        limit=limit + 5,
        found_only=True,
        as_of=as_of,
    )
    hits = [h for h in hits if h.role in ROLES and h.content and h.content != message]
    hits = hits[:limit]
    around: dict[int, list[asyncpg.Record]] = {}
    wanted = [h.id for h in hits if serves(h)]
    if wanted:
        for r in await conn.fetch(AROUND, user_id, wanted):
            around.setdefault(r["hit"], []).append(r)
    shown = {h.id for h in hits}
    out: list[Turn] = []
    for h in hits:
        before = [r for r in around.get(h.id, []) if not r["after"] and r["id"] not in shown]
        after = [r for r in around.get(h.id, []) if r["after"] and r["id"] not in shown]
        if h.content.rstrip().endswith("?"):
            before = []  # a question: the answer after it; a short turn: both sides
        for r in before:
            out.append(_around(r, h))
            shown.add(r["id"])
        out.append(
            Turn(h.id, h.role, h.display_name, h.content, h.chat_id, h.occurred_at, h.cosine)
        )
        for r in after:
            out.append(_around(r, h))
            shown.add(r["id"])
    return out


def _around(r: asyncpg.Record, hit: MessageHit) -> Turn:
    return Turn(
        r["id"],
        r["role"],
        r["display_name"],
        r["content"],
        hit.chat_id,
        r["occurred_at"],
        None,
        neighbour_of=hit.id,
    )


def people_cap(block: Block, budget: int) -> int:
    """Known people take at most a fifth of the budget, but always room for the
    first one (Ash: people first)."""
    first = tokens(block.header) + tokens(block.footer) + 1
    first += tokens(block.lines[0]) + 1 if block.lines else 0
    return max(budget // PEOPLE_SHARE, first)


def allocation(
    people: list[Person],
    memories: list[MemoryHit],
    turns: list[Turn],
    standing: list[MemoryHit] | None = None,
) -> list[tuple[str, int]]:
    """The order the budget is spent in (docs/context.md): people, the standing
    instructions and preferences (most relevant first), the turn hits best first,
    the relevant memories best first, the turns around the hits, the other
    memories. A memory learned from a turn already shown is left out (the turn
    says it in the speaker's own words)."""
    shown = {t.id for t in turns}
    memories_left = [
        i for i, m in enumerate(memories) if m.source_turn is None or m.source_turn.id not in shown
    ]
    order = [("known_people", i) for i in range(len(people))]
    order += [("standing", i) for i in range(len(standing or []))]
    order += [("messages", i) for i, t in enumerate(turns) if t.neighbour_of is None]
    order += [("memories", i) for i in memories_left if memories[i].relevant]
    order += [("messages", i) for i, t in enumerate(turns) if t.neighbour_of is not None]
    order += [("memories", i) for i in memories_left if not memories[i].relevant]
    return order


async def assemble_auto(
    pool: asyncpg.Pool, user_id: str, query: ContextQuery, qv: QueryVector
) -> ContextOut:
    chat = query.chat
    gathers = asks_across(query.message)

    async def turn_part() -> list[Turn]:
        if lists_newest(query.message):  # a blank message: nothing to be relevant to
            return []
        async with pool.acquire() as conn:
            limit = turn_hits(query.token_budget)
            return await past_turns(
                conn, user_id, query.message, qv, limit=limit, as_of=query.as_of
            )

    async def memory_part() -> tuple[
        list[MemoryHit], list[MemoryHit], dict[uuid.UUID, Person], list[Person]
    ]:
        async with pool.acquire() as conn:
            member = await is_member(conn, user_id, chat) if chat else False
            standing = standing_of(  # the standing ones, by Ash's recall ranking
                await search_memories(
                    conn,
                    user_id,
                    query=query.message,
                    vector=qv.vector,
                    model=qv.model,
                    chat=chat,
                    member=member,
                    types=STANDING_TYPES,
                    limit=STANDING_READ,
                    as_of=query.as_of,
                )
            )
            memories = await search_memories(
                conn,
                user_id,
                query=query.message,
                vector=qv.vector,
                model=qv.model,
                chat=chat,
                member=member,
                limit=MAX_MEMORIES,
                as_of=query.as_of,
                types=CONTEXT_TYPES,
            )
            # a standing one is shown in its own block; the relevant ones first (a
            # stable sort keeps each part's ranking)
            ids = {m.id for m in standing}
            memories = [m for m in memories if m.id not in ids]
            memories.sort(key=lambda m: not m.relevant)
            subjects = await subject_people(conn, memories, user_id)
            return memories, standing, subjects, await list_people(conn, user_id)

    # The turns and the memories on two connections at once (each part holds one
    # connection at a time, so a busy pool cannot deadlock): PostgreSQL runs both.
    turns, (memories, standing, subjects, people) = await asyncio.gather(turn_part(), memory_part())
    turns, notes = updates(turns, memories + standing)
    order = allocation(people, memories, turns, standing)
    header = "## Related Past Messages\n"
    if asks_order(query.message):  # dated evidence in time order, spent by relevance
        turns, order = in_time_order(turns, order)
        header = "## Related Past Messages (oldest first)\n"
    blocks = [
        standing_block(standing, [memory_text(m) for m in standing]),
        people_block(people),
        Block(
            name="memories",
            header="## Relevant Context from Memory\n",
            lines=[f"- {memory_label(m, subjects)} {memory_text(m)}" for m in memories],
        ),
        Block(
            name="messages",
            header=header,
            lines=[
                message_line(t, notes.get(t.id, ""), line_chars(query.token_budget, gathers))
                for t in turns
            ],
        ),
    ]
    fitted = fit_by_priority(
        blocks,
        query.token_budget,
        order,
        caps={
            "standing": standing_cap(blocks[0], query.token_budget),
            "known_people": people_cap(blocks[1], query.token_budget),
        },
    )
    kept_standing = [standing[i] for i in fitted.kept["standing"]]
    kept_people = [people[i] for i in fitted.kept["known_people"]]
    kept_memories = [memories[i] for i in fitted.kept["memories"]]
    kept_turns = [turns[i] for i in fitted.kept["messages"]]
    return ContextOut(
        policy="auto",
        text=fitted.text,
        tokens=fitted.tokens,
        token_budget=query.token_budget,
        truncated=fitted.dropped,
        retrieval=qv.retrieval,
        warning=qv.warning,
        sections={
            "standing": [
                {
                    "id": str(m.id),
                    "type": m.type,
                    "content": m.content,
                    "similarity": m.similarity,
                    "source_turn": m.source_turn.public() if m.source_turn else None,
                    "created_at": m.created_at.isoformat(),
                    "valid_from": m.valid_from.isoformat() if m.valid_from else None,
                    "replaced": m.replaced.public() if m.replaced else None,
                }
                for m in kept_standing
            ],
            "known_people": [p.public() for p in kept_people],
            "memories": [
                {
                    "id": str(m.id),
                    "content": m.content,
                    "label": memory_label(m, subjects),
                    "scope": m.scope,
                    "source": m.source,
                    "subjects": [subjects[s].label for s in m.subjects if s in subjects],
                    "similarity": m.similarity,
                    "relevant": m.relevant,
                    "source_turn": m.source_turn.public() if m.source_turn else None,
                    "created_at": m.created_at.isoformat(),
                    "valid_from": m.valid_from.isoformat() if m.valid_from else None,
                    "valid_to": m.valid_to.isoformat() if m.valid_to else None,
                    "replaced": m.replaced.public() if m.replaced else None,
                }
                for m in kept_memories
            ],
            "messages": [
                {
                    "id": t.id,
                    "role": t.role,
                    "content": t.content,
                    "chat_id": t.chat_id,
                    "similarity": t.similarity,
                    "occurred_at": t.occurred_at.isoformat(),
                    "neighbour_of": t.neighbour_of,
                }
                for t in kept_turns
            ],
        },
    )
