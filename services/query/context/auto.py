"""Ash's automatic context: relevant past messages, top memories, known people.

- past messages of this user above similarity 0.3, top 5 (full-text matches
  when there is no query vector), recent first at equal relevance;
- the top 10 visible memories whatever their similarity, each attributed
  ("[Memory (about Sarah)] ..."; shared ones and non-user sources say so);
- the known-people block;
all cut to the token budget (people first, then memories, then messages).
"""

from __future__ import annotations

import uuid

import asyncpg

from services.query.context.budget import Block, fit_blocks
from services.query.context.models import ContextIn, ContextOut
from shared.memory.people import Person, list_people
from shared.memory.recall import QueryVector, subject_people
from shared.memory.search import MemoryHit, MessageHit, is_member, search_memories, search_messages

MAX_MESSAGES = 5
MAX_MEMORIES = 10
MIN_MESSAGE_SIMILARITY = 0.3
LINE_CHARS = 600


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "…"


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
    return f"[{label}]"


def message_line(hit: MessageHit) -> str:
    when = hit.occurred_at.date().isoformat()
    return f"- [Past message, {hit.role}, {when}] {_one_line(hit.content)}"


async def assemble_auto(
    pool: asyncpg.Pool, user_id: str, body: ContextIn, qv: QueryVector
) -> ContextOut:
    chat = body.chat.chat() if body.chat else None
    async with pool.acquire() as conn:
        member = await is_member(conn, user_id, chat) if chat else False
        messages = (
            await search_messages(
                conn,
                user_id,
                message=body.message,
                vector=qv.vector,
                model=qv.model,
                limit=MAX_MESSAGES,
                threshold=MIN_MESSAGE_SIMILARITY,
            )
            if body.message.strip()
            else []
        )
        memories = await search_memories(
            conn,
            user_id,
            query=body.message,
            vector=qv.vector,
            model=qv.model,
            chat=chat,
            member=member,
            limit=MAX_MEMORIES,
        )
        subjects = await subject_people(conn, memories)
        people = await list_people(conn, user_id)
    blocks = [
        people_block(people),
        Block(
            name="memories",
            header="## Relevant Context from Memory\n",
            lines=[f"- {memory_label(m, subjects)} {_one_line(m.content)}" for m in memories],
        ),
        Block(
            name="messages",
            header="## Related Past Messages\n",
            lines=[message_line(m) for m in messages],
        ),
    ]
    fitted = fit_blocks(blocks, body.token_budget)
    kept_people = [people[i] for i in fitted.kept["known_people"]]
    kept_memories = [memories[i] for i in fitted.kept["memories"]]
    kept_messages = [messages[i] for i in fitted.kept["messages"]]
    return ContextOut(
        policy="auto",
        text=fitted.text,
        tokens=fitted.tokens,
        token_budget=body.token_budget,
        truncated=fitted.dropped,
        retrieval=qv.retrieval,
        warning=qv.warning,
        sections={
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
                    "created_at": m.created_at.isoformat(),
                }
                for m in kept_memories
            ],
            "messages": [
                {
                    "id": m.id,
                    "role": m.role,
                    "content": m.content,
                    "chat_id": m.chat_id,
                    "similarity": m.similarity,
                    "occurred_at": m.occurred_at.isoformat(),
                }
                for m in kept_messages
            ],
        },
    )
