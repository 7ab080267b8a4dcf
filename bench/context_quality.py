"""What reaches the agent: LoCoMo evidence coverage of context, recall and search.

    python -m bench.context --quality [PATH/TO/locomo10.json] [--conversations N]
    make bench-context-quality LOCOMO=path

Every conversation (one engram user each, ``locomo-<sample_id>``) goes through the
whole running pipeline as a platform would send it: for each session an
``EpisodeStarted``, its turns (speaker as display name, the session's date as
their time, a shared image's caption after the text, ``dia_id`` as the external
message id), then an ``EpisodeClosed`` once ingest has stored them; ingest, the
embedder and the extractor (offline mode: no model) do the rest. The bench waits
until every turn and learned memory is embedded and every episode summarised,
then asks every question (categories 1-4; 5, adversarial, reported apart) as the
agent would:

- ``POST /v1/context`` (Ash's ``auto`` policy) at token budgets 500, 1,000 and
  2,000: an evidence turn is covered when its text is in the context's text, or
  a memory in the context (its memories or its standing instructions and
  preferences) came from it;
- ``POST /v1/recall`` (5 memories) and ``POST /v1/memory/search`` (10): covered
  when a returned memory came from an evidence turn (its ``source_message_id``,
  or the extractor's quote, ``source_context``, is part of the turn's text); an
  observation (consolidation) came from the turns of the memories in its evidence
  whose statements its text holds;
- ``POST /v1/episodes/search``: covered when the evidence turn's session is one
  of the top 3 episodes;
- ``any memory`` (no call): what recall and memory search could reach at best, the
  evidence turns some active memory of the user (not an episode summary) came from.

Coverage is the share of a question's evidence turns covered, averaged over the
questions (for the many one-turn questions: whether the agent got it). Reported
by category, for the tuning half (first five sample_ids), the check half (the
last five) and all, with the mean tokens each surface hands the agent (context:
its own estimate; recall and search: their contents at 4 characters a token).

``--one-user``: every conversation is a chat of one user (``locomo-one``; with
all ten, 5,882 turns, past the 5,000 at which a user's turns are searched as a
big user's), as a heavy user of an assistant has many chats; each conversation's
questions are asked of that user, and only its own turns and the memories
learned from them count.

The system never sees the dataset's annotations, answers or evidence. Uses the
stack of ``make run`` when one is running, else starts its own. Writes
``bench/results/context_quality.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis

from bench.common import Progress, table, write_result
from bench.locomo import (
    DEFAULT_PATH,
    LOCOMO,
    Conversation,
    Dataset,
    Question,
    add_dataset_arguments,
    dataset,
    halves,
    indexed,
    one_user,
    pick,
    stack,
    turn_events,
    turn_of,
)
from shared.apikeys import create_key
from shared.db import create_pool
from shared.embeddings import vector_index
from shared.events import EpisodeClosed, EpisodeStarted, TurnReceived
from shared.settings import CommonSettings
from shared.streams import Publisher

BUDGETS = (500, 1_000, 2_000)
RECALL_LIMIT = 5
SEARCH_LIMIT = 10
EPISODES_TOP = 3
SURFACES = (
    *(f"context@{b}" for b in BUDGETS),
    "recall",
    "memory.search",
    "episodes.search",
    "any memory",
)
NAMESPACE = uuid.UUID("6b1e2f3a-0c4d-4e5f-9a8b-7c6d5e4f3a2b")


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":")[0])


def episode_id(conv: Conversation, session: int) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"{conv.sample_id}/{session}")


def sessions(conv: Conversation) -> dict[int, list[TurnReceived]]:
    """The conversation's turn events by session, each naming its session's episode."""
    out: dict[int, list[TurnReceived]] = defaultdict(list)
    for turn, ev in zip(conv.turns, turn_events(conv), strict=True):
        s = session_of(turn.dia_id)
        out[s].append(ev.model_copy(update={"episode_id": episode_id(conv, s)}))
    return dict(sorted(out.items()))


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


# -- loading ------------------------------------------------------------------------

STORED = "SELECT count(*) FROM messages WHERE user_id = $1 AND episode_id = $2"

STATE = """
SELECT
  (SELECT count(*) FROM messages WHERE user_id = ANY($1::text[])) AS turns,
  (SELECT count(*) FROM messages WHERE user_id = ANY($1::text[])
     AND embedding_state IN ('ready', 'error')) AS turns_embedded,
  (SELECT count(*) FROM episodes WHERE user_id = ANY($1::text[])) AS episodes,
  (SELECT count(*) FROM episodes WHERE user_id = ANY($1::text[]) AND status = 'closed'
     AND extracted_turn_count IS NOT DISTINCT FROM turn_count
     AND (extracted_at IS NOT NULL OR extraction_error IS NOT NULL)
     AND (summary IS NULL OR embedding_state IN ('ready', 'error'))) AS episodes_done,
  (SELECT count(*) FROM memory_items WHERE user_id = ANY($1::text[])) AS memories,
  (SELECT count(*) FROM memory_items WHERE user_id = ANY($1::text[])
     AND embedding_state = 'pending') AS memories_pending
"""


async def pipeline_state(pool: asyncpg.Pool, users: list[str]) -> dict[str, Any]:
    return dict(await pool.fetchrow(STATE, users) or {})


async def publish_conversation(
    pool: asyncpg.Pool, publisher: Publisher, conv: Conversation, progress: Callable[[], None]
) -> None:
    """Session by session: started, its turns, closed once ingest has stored them
    (turns and episode events travel on two streams, so nothing orders them but this)."""
    for s, events in sessions(conv).items():
        ep = episode_id(conv, s)
        common = {"user_id": conv.user_id, "provider": conv.dataset, "chat_id": conv.sample_id}
        await publisher.publish(
            "episodes",
            [EpisodeStarted(episode_id=ep, occurred_at=events[0].occurred_at, **common)],
        )
        await publisher.publish("turns", events)
        deadline = time.monotonic() + 600
        while await pool.fetchval(STORED, conv.user_id, ep) < len(events):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{conv.sample_id} session {s}: turns not stored in 600 s")
            await asyncio.sleep(0.2)
        closed_at = events[-1].occurred_at + timedelta(seconds=1)
        await publisher.publish(
            "episodes", [EpisodeClosed(episode_id=ep, occurred_at=closed_at, **common)]
        )
        progress()


async def load_pipeline(
    pool: asyncpg.Pool, settings: CommonSettings, convs: list[Conversation], *, reuse: bool
) -> dict[str, Any]:
    users = [c.user_id for c in convs]
    n_turns = sum(len(c.turns) for c in convs)
    n_sessions = sum(len(sessions(c)) for c in convs)
    state = await pipeline_state(pool, users)
    if (
        reuse
        and state["turns_embedded"] == n_turns
        and state["episodes_done"] == n_sessions
        and state["memories_pending"] == 0
    ):
        print(f"reusing {len(users)} loaded users", file=sys.stderr)
        return {"reused": True, **state}
    await pool.execute("DELETE FROM users WHERE id = ANY($1::text[])", users)
    assert settings.redis_url is not None
    redis = aioredis.from_url(settings.redis_url.get_secret_value())
    publisher = Publisher(redis, settings)
    started = time.perf_counter()
    sent = Progress("sessions published", n_sessions)
    done = 0

    def one_more() -> None:
        nonlocal done
        done += 1
        sent.update(done)

    try:
        await asyncio.gather(*(publish_conversation(pool, publisher, c, one_more) for c in convs))
    finally:
        await redis.aclose()
    sent.update(n_sessions, force=True)
    published = time.perf_counter() - started
    work = Progress("turns embedded + episodes summarised", n_turns + n_sessions)
    while True:
        state = await pipeline_state(pool, users)
        work.update(state["turns_embedded"] + state["episodes_done"])
        if (
            state["turns_embedded"] >= n_turns
            and state["episodes_done"] >= n_sessions
            and state["memories_pending"] == 0
        ):
            break
        if time.perf_counter() - started > 3600:
            raise RuntimeError(f"pipeline not done after an hour: {dict(state)}")
        await asyncio.sleep(1)
    work.update(n_turns + n_sessions, force=True)
    return {
        "reused": False,
        **state,
        "publish_s": round(published, 1),
        "pipeline_s": round(time.perf_counter() - started, 1),
    }


# -- what counts as the evidence ----------------------------------------------------


@dataclass
class Truth:
    """One user's turns and memories, to tell whether an answer holds an evidence turn."""

    turn_id: dict[str, set[int]]  # dia_id -> messages.id (a split turn's: each piece's)
    turn_text: dict[str, str]  # dia_id -> normalised content (a split turn's: its first)
    memory_turns: dict[str, set[str]]  # memory id -> the dia_ids it came from
    active: list[str]  # the memories a recall may return (active, not an episode's)

    def memory_sources(self, memory_ids: list[str]) -> set[str]:
        return set().union(*(self.memory_turns.get(m, set()) for m in memory_ids))


async def truth(pool: asyncpg.Pool, user_id: str, chat_id: str) -> Truth:
    """The conversation's own turns (its chat), and the memories learned from them."""
    turns = await pool.fetch(
        "SELECT id, external_id, content FROM messages WHERE user_id = $1 AND chat_id = $2",
        user_id,
        chat_id,
    )
    turn_id: dict[str, set[int]] = defaultdict(set)
    turn_text: dict[str, str] = {}
    for r in sorted(turns, key=lambda r: r["external_id"]):
        turn_id[turn_of(r["external_id"])].add(r["id"])
        turn_text.setdefault(turn_of(r["external_id"]), _norm(r["content"]))
    by_id = {r["id"]: turn_of(r["external_id"]) for r in turns}
    memory_turns: dict[str, set[str]] = {}
    memories = await pool.fetch(
        "SELECT id, type, status, content, data, source_message_id, source_context "
        "FROM memory_items WHERE user_id = $1",
        user_id,
    )
    for m in memories:
        src: set[str] = set()
        if m["source_message_id"] in by_id:
            src.add(by_id[m["source_message_id"]])
        quote = _norm(m["source_context"] or "")
        if len(quote) >= 12:
            src |= {d for d, text in turn_text.items() if quote in text}
        memory_turns[str(m["id"])] = src
    # An observation (consolidation) states some of the memories in its evidence, each
    # whole: it holds the turns of each one whose statement is in its text, as that
    # memory would (it has no source turn of its own).
    content = {str(m["id"]): _norm(m["content"]) for m in memories}
    for m in memories:
        if m["type"] != "observation":
            continue
        said = content[str(m["id"])]
        for e in (m["data"] or {}).get("evidence", {}).get("memory_ids", []):
            if e in content and content[e] and content[e] in said:
                memory_turns[str(m["id"])] |= memory_turns.get(e, set())
    active = [str(m["id"]) for m in memories if m["status"] == "active" and m["type"] != "episode"]
    return Truth(turn_id, turn_text, memory_turns, active)


# -- asking -------------------------------------------------------------------------

# (half, category, surface, coverage, tokens) of one answer
Answer = tuple[str, int, str, float, float]


def _share(covered: set[str], evidence: frozenset[str]) -> float:
    return len(covered & evidence) / len(evidence)


def context_covered(body: dict[str, Any], t: Truth, evidence: frozenset[str]) -> set[str]:
    text = _norm(body["text"])
    got = {d for d in evidence if d in t.turn_text and t.turn_text[d][:200] in text}
    shown = {m["id"] for m in body["sections"].get("messages", [])}
    got |= {d for d, ids in t.turn_id.items() if d in evidence and ids & shown}
    shown_memories = [
        m["id"] for part in ("memories", "standing") for m in body["sections"].get(part, [])
    ]
    return got | t.memory_sources(shown_memories)


async def ask_all(
    base_url: str,
    keys: dict[str, str],
    convs: list[Conversation],
    truths: dict[str, Truth],
    half: dict[str, str],
) -> list[Answer]:
    slots = asyncio.Semaphore(4)
    work = [(c, q) for c in convs for q in c.questions]
    progress = Progress("questions", len(work))
    done = 0

    async def one(client: httpx.AsyncClient, conv: Conversation, q: Question) -> list[Answer]:
        nonlocal done
        t = truths[conv.sample_id]
        headers = {"Authorization": f"Bearer {keys[conv.user_id]}"}
        h = half[conv.sample_id]
        out: list[Answer] = []

        async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            r = await client.post(path, json=body, headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"{path}: HTTP {r.status_code}: {r.text[:300]}")
            data: dict[str, Any] = r.json()
            return data

        async with slots:
            for budget in BUDGETS:
                body = await post("/v1/context", {"message": q.text, "token_budget": budget})
                got = context_covered(body, t, q.evidence)
                out.append(
                    (h, q.category, f"context@{budget}", _share(got, q.evidence), body["tokens"])
                )
            body = await post("/v1/recall", {"query": q.text, "limit": RECALL_LIMIT})
            hits = body["results"]
            got = t.memory_sources([m["id"] for m in hits])
            tokens = sum(len(m["content"]) for m in hits) / 4
            out.append((h, q.category, "recall", _share(got, q.evidence), tokens))
            body = await post("/v1/memory/search", {"query": q.text, "limit": SEARCH_LIMIT})
            hits = body["results"]
            got = t.memory_sources([m["id"] for m in hits])
            tokens = sum(len(m["content_snippet"]) for m in hits) / 4
            out.append((h, q.category, "memory.search", _share(got, q.evidence), tokens))
            body = await post("/v1/episodes/search", {"query": q.text, "limit": EPISODES_TOP})
            top = {e["episode_id"] for e in body["episodes"][:EPISODES_TOP]}
            got = {d for d in q.evidence if str(episode_id(conv, session_of(d))) in top}
            tokens = (
                sum(
                    len(e["line"] or "") + len(str(e["summary"] or ""))
                    for e in body["episodes"][:EPISODES_TOP]
                )
                / 4
            )
            out.append((h, q.category, "episodes.search", _share(got, q.evidence), tokens))
            # the ceiling of recall and memory search: every memory they may return
            got = t.memory_sources(t.active)
            out.append((h, q.category, "any memory", _share(got, q.evidence), 0.0))
        done += 1
        progress.update(done)
        return out

    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        # one call first: the query service loads its model on first use
        c0 = convs[0]
        headers = {"Authorization": f"Bearer {keys[c0.user_id]}"}
        r = await client.post("/v1/context", json={"message": "hello"}, headers=headers)
        r.raise_for_status()
        answers = await asyncio.gather(*(one(client, c, q) for c, q in work))
    progress.update(len(work), force=True)
    return [a for batch in answers for a in batch]


# -- summing up ---------------------------------------------------------------------


def summarise(answers: list[Answer], ds: Dataset = LOCOMO) -> dict[str, Any]:
    """surface -> part (tune / check / all) -> group -> coverage, tokens, n."""
    out: dict[str, Any] = {}
    for surface in SURFACES:
        out[surface] = {}
        for part in ("tune", "check", "all"):
            rows = [a for a in answers if a[2] == surface and part in ("all", a[0])]
            groups: dict[str, list[Answer]] = defaultdict(list)
            for a in rows:
                groups[str(a[1])].append(a)
                for name, members in ds.groups.items():
                    if a[1] in members:
                        groups[name].append(a)
            out[surface][part] = {
                g: {
                    "coverage": round(sum(a[3] for a in rs) / len(rs), 4),
                    "tokens": round(sum(a[4] for a in rs) / len(rs), 1),
                    "n": len(rs),
                }
                for g, rs in sorted(groups.items())
            }
    return out


def _cell(summary: dict[str, Any], surface: str, part: str, group: str) -> str:
    v = summary[surface].get(part, {}).get(group)
    return "" if v is None else f"{v['coverage']:.3f}"


def report(summary: dict[str, Any], ds: Dataset = LOCOMO) -> str:
    """Each surface: the headline group on both halves and all, each category on all."""
    head = ds.headline
    cats = [str(c) for c in sorted(ds.categories) if str(c) in summary[SURFACES[0]]["all"]]
    rows: list[tuple[str, ...]] = []
    for surface in SURFACES:
        tokens = summary[surface]["all"].get(head, {}).get("tokens", 0)
        rows.append(
            (
                surface,
                _cell(summary, surface, "tune", head),
                _cell(summary, surface, "check", head),
                _cell(summary, surface, "all", head),
                *(_cell(summary, surface, "all", g) for g in cats),
                f"{tokens:.0f}",
            )
        )
    header: tuple[str, ...] = ("surface", f"{head} tune", f"{head} check", f"{head} all")
    header += tuple(f"{g} {ds.categories[int(g)][:9]}" for g in cats)
    header += ("tokens",)
    return table(rows, header)


def report_halves(summary: dict[str, Any], ds: Dataset = LOCOMO) -> str:
    """Each surface and category (and group of them): coverage on tune, check, all."""
    rows: list[tuple[str, ...]] = []
    for surface in SURFACES:
        for g in [*ds.groups, *(str(c) for c in sorted(ds.categories))]:
            if g not in summary[surface]["all"]:
                continue
            n = summary[surface]["all"][g]["n"]
            cells = (_cell(summary, surface, p, g) for p in ("tune", "check", "all"))
            rows.append((surface, ds.label(g), *cells, str(n)))
    return table(rows, ("surface", "categories", "tune", "check", "all", "n"))


async def run(
    path: Path, n: int | None, *, reuse: bool, one: bool = False, ds: Dataset = LOCOMO
) -> dict[str, Any]:
    every = ds.load(path)
    half = halves(every)
    convs = pick(every, n, half)
    if one:
        convs = [one_user(c) for c in convs]
    with stack(("ingest", "embedder", "extractor", "query")) as (settings, where):
        print(f"using the {where}", file=sys.stderr)
        assert settings.database_url is not None
        pool = await create_pool(settings.database_url.get_secret_value(), max_size=4)
        try:
            loading = await load_pipeline(pool, settings, convs, reuse=reuse)
            if one and loading["turns"] > vector_index.MIN_ROWS:
                await indexed(pool, convs[0].user_id)
            keys: dict[str, str] = {}
            truths = {}
            for c in convs:
                if c.user_id not in keys:
                    _, keys[c.user_id] = await create_key(pool, user_id=c.user_id)
                truths[c.sample_id] = await truth(pool, c.user_id, c.sample_id)
        finally:
            await pool.close()
        base = f"http://127.0.0.1:{settings.query_port}"
        started = time.perf_counter()
        answers = await ask_all(base, keys, convs, truths, half)
        asked_s = time.perf_counter() - started
    return {
        "dataset": str(path),
        "set": ds.name,
        "stack": where,
        "conversations": [c.sample_id for c in convs],
        "form": "one user" if one else "a user each",
        "turns": sum(len(c.turns) for c in convs),
        "questions": sum(len(c.questions) for c in convs),
        "budgets": list(BUDGETS),
        "loading": {k: v for k, v in loading.items()},
        "asking_s": round(asked_s, 1),
        "results": summarise(answers, ds),
        "note": "2-core machine shared with other engineers' work while measured",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_arguments(p)
    p.add_argument(
        "--conversations", type=int, default=None, help="only N (taken evenly from both halves)"
    )
    p.add_argument("--reuse", action="store_true", help="keep the users if fully loaded")
    p.add_argument(
        "--one-user",
        action="store_true",
        help="every conversation a chat of one heavy user (all ten: 5,882 turns, past the "
        "5,000 of a big user's search path); another conversation's turn is a miss",
    )
    p.add_argument("--name", default=None, help="bench/results/<name>.json")
    args = p.parse_args(argv)
    ds = dataset(args.dataset)
    if args.locomo is None and ds is not LOCOMO:
        p.error("--dataset beam needs the path of BEAM's tier directory (chats/100K)")
    path = args.locomo or DEFAULT_PATH
    if not path.exists():
        p.error(f"{path} not found")
    name = args.name or ("context_quality" if ds is LOCOMO else f"context_quality-{ds.name}")
    result = asyncio.run(run(path, args.conversations, reuse=args.reuse, one=args.one_user, ds=ds))
    print()
    print(report(result["results"], ds))
    print("\nby category, tuning half (first five) and check half (last five):\n")
    print(report_halves(result["results"], ds))
    print(f"\nwritten to {write_result(name, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
