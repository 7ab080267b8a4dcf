"""The one ranking engine: every surface's spec over the same fixture, on real PostgreSQL.

Each seed's ranking rule is checked against scores recomputed here from the
database's own distances and text ranks, so a surface that forked its formula,
or a spec field that stopped being read, fails:

- Nova (memory search): 0.7 x min-max(1 / (1 + d)) + 0.3 x min-max(ts_rank) over
  the union of each signal's candidates;
- Ash (recall): 0.7 x cosine + 0.3 x rank / (rank + 1), the newest rows as
  candidates too, top N; the context's turns: nothing under 0.3 cosine unless a
  word matches, top N;
- Nous (episode recall): another user's episode scores 0.8 of the current user's;
  under the floor, nothing;
- fused (message search): the answer right after a matching question is found,
  a question keeps 0.7 of its score.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest

from services.query.episodes.recall import recall_episodes
from services.query.ranking import fusion
from services.query.ranking.fusion import Candidate, faded, fuse
from services.query.ranking.memories import SearchParams, search
from services.query.ranking.recall import search_memories
from services.query.ranking.sql import or_tsquery
from services.query.ranking.turns import rank_turns
from tests.query.helpers import unit
from tests.retrieval.helpers import T, add_turns

Q = unit(1)
MODEL = "contract-model"
QUERY = "hiking trip"

MEMORIES = [
    # content, vector, days ago
    ("Went hiking in the Alps with Ana", unit(10, near=Q, noise=0.4), 30),
    ("Bought new hiking boots for the trip", unit(11), 20),
    ("Quarterly report is due on Friday", unit(12, near=Q, noise=1.5), 10),
    ("Dentist appointment moved to Tuesday", unit(13), 0),
]

TURNS = [
    T("Where did you go hiking last summer?", unit(20, near=Q, noise=0.5)),
    # the other speaker's reply (a message of the asker's own would be their burst)
    T("The Alps, with Ana and her dog", unit(21), speaker="Bob", role="assistant"),
    T("I like cooking pasta on Sundays", unit(22)),
    T("Planning a hiking trip for the whole group next year", unit(23)),
    T("Random note about taxes", unit(24)),
]


async def _memories(pool: asyncpg.Pool, user_id: str) -> list[uuid.UUID]:
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    ids = []
    for content, vec, days in MEMORIES:
        ids.append(
            await pool.fetchval(
                "INSERT INTO memory_items (user_id, type, content, embedding, embedding_state, "
                "embedding_model, created_at) VALUES ($1, 'fact', $2, $3, 'ready', $4, "
                "now() - make_interval(days => $5)) RETURNING id",
                user_id,
                content,
                np.asarray(vec, dtype=np.float32),
                MODEL,
                days,
            )
        )
    return ids


def _minmax(values: dict[uuid.UUID, float]) -> dict[uuid.UUID, float]:
    lo, hi = min(values.values()), max(values.values())
    return {k: 1.0 if hi == lo else (v - lo) / (hi - lo) for k, v in values.items()}


async def test_nova_memory_search_is_70_30_min_max_over_the_union(pool, user_id):
    await _memories(pool, user_id)
    result = await search(pool, SearchParams(query=QUERY, limit=10), user_id=user_id, vector=Q)
    rows = await pool.fetch(
        f"""SELECT id, 1.0 / (1.0 + (embedding <=> $2::vector)) AS sim,
                   ts_rank(fts, {or_tsquery("$3")}) AS rank, importance,
                   coalesce(last_accessed_at, created_at) AS last_read
            FROM memory_items WHERE user_id = $1""",
        user_id,
        Q,
        QUERY,
    )
    sem = _minmax({r["id"]: float(r["sim"]) for r in rows})
    lex = _minmax({r["id"]: float(r["rank"]) for r in rows if (r["rank"] or 0) > 0})
    # Jarvus's fade: the memories were stored days ago and never read
    now = datetime.now(UTC)
    fade = {r["id"]: faded(fusion.NOVA, r["importance"], r["last_read"], now) for r in rows}
    assert result.mode == "hybrid" and len(result.hits) == len(MEMORIES)
    for h in result.hits:
        expected = (0.7 * sem[h.id] + 0.3 * lex.get(h.id, 0.0)) * fade[h.id]
        assert h.score == pytest.approx(expected, abs=1e-6)
        assert h.fts == (h.id in lex)
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)


async def test_ash_recall_is_cosine_plus_saturated_text_rank_with_the_newest_top_n(pool, user_id):
    ids = await _memories(pool, user_id)
    hits = await search_memories(pool, user_id, query=QUERY, vector=Q, model=MODEL, limit=4)
    rows = await pool.fetch(
        f"""SELECT id, 1 - (embedding <=> $2::vector) AS cos,
                   coalesce(ts_rank_cd(fts, {or_tsquery("$3")}), 0) AS r
            FROM memory_items WHERE user_id = $1""",
        user_id,
        Q,
        QUERY,
    )
    want = {r["id"]: 0.7 * float(r["cos"]) + 0.3 * r["r"] / (r["r"] + 1) for r in rows}
    assert {h.id for h in hits} == set(ids)  # the newest, unrelated one is a candidate too
    for h in hits:
        assert h.score == pytest.approx(want[h.id], abs=1e-6)
    assert hits[0].id == ids[0]
    top2 = await search_memories(pool, user_id, query=QUERY, vector=Q, model=MODEL, limit=2)
    assert [h.id for h in top2] == [h.id for h in hits[:2]]  # top N


async def test_the_context_turns_keep_ash_s_floor_and_top_n(pool, user_id):
    _, ids = await add_turns(pool, user_id, TURNS)
    hits = await rank_turns(
        pool,
        fusion.CONTEXT_TURNS,
        user_id=user_id,
        query=QUERY,
        vector=Q,
        limit=10,
        found_only=True,
    )
    got = {h.id for h in hits}
    # the question (cosine >= 0.3), its answer (right after it), the turn sharing words
    assert {ids[0], ids[1], ids[3]} <= got
    # cosine under 0.3 and no shared word: never
    assert ids[2] not in got and ids[4] not in got
    for h in hits:
        assert h.found or h.answers
        if h.found and h.lexical_rank is None:
            assert h.cosine is not None and h.cosine >= 0.3
    one = await rank_turns(
        pool, fusion.CONTEXT_TURNS, user_id=user_id, query=QUERY, vector=Q, limit=1
    )
    assert len(one) == 1 and one[0].id == hits[0].id  # top N
    # the message search's fused mode has no floor: it may return them as neighbours
    fused = await rank_turns(pool, fusion.FUSED, user_id=user_id, query=QUERY, vector=Q, limit=10)
    assert {h.id for h in fused} >= got


async def test_fused_finds_the_answer_after_a_matching_question(pool, user_id):
    _, ids = await add_turns(pool, user_id, TURNS[:2])
    # under the context's spec the answer (cosine under 0.3, no shared word) is
    # found only as the turn after the question
    hits = await rank_turns(
        pool, fusion.CONTEXT_TURNS, user_id=user_id, query=QUERY, vector=Q, limit=5
    )
    by_id = {h.id: h for h in hits}
    question, answer = by_id[ids[0]], by_id[ids[1]]
    assert not answer.found and answer.answers
    # the question keeps 0.7 of its own score, its answer gains 0.7 of it: a tie,
    # broken by the later turn first
    assert answer.score == pytest.approx(question.score, abs=1e-9)
    assert [h.id for h in hits[:2]] == [ids[1], ids[0]]


async def _episode(pool: asyncpg.Pool, user_id: str, text: str, vec: list[float]) -> uuid.UUID:
    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    return await pool.fetchval(
        """INSERT INTO episodes (id, user_id, provider, chat_id, status, started_at,
                                 last_active_at, summary, summary_text, embedding,
                                 embedding_state)
           VALUES (gen_random_uuid(), $1, 'test', 'c', 'closed', now(), now(), $2, $3, $4,
                   'ready')
           RETURNING id""",
        user_id,
        {"title": text, "summary": text},
        text,
        np.asarray(vec, dtype=np.float32),
    )


async def test_nous_boosts_the_current_user_and_has_a_floor(pool, user_id):
    other = f"other-{uuid.uuid4().hex[:8]}"
    vec = unit(30, near=Q, noise=0.3)
    mine = await _episode(pool, user_id, "A hiking trip to the Alps", vec)
    theirs = await _episode(pool, other, "A hiking trip to the Alps", vec)
    far = await _episode(pool, user_id, "Sorted the tax papers", unit(31))
    hits = await recall_episodes(
        pool,
        query=QUERY,
        current_user_id=user_id,
        visible_users=[user_id, other],
        query_vector=Q,
    )
    assert [h.episode_id for h in hits] == [mine, theirs]  # the unrelated one: floored
    assert hits[1].score == pytest.approx(0.8 * hits[0].score)
    assert far not in {h.episode_id for h in hits}
    nothing = await recall_episodes(
        pool,
        query="quantum chromodynamics",
        current_user_id=user_id,
        visible_users=[user_id],
        query_vector=unit(99),
    )
    assert nothing == []


async def test_nous_finds_an_episode_through_its_own_turns(pool, user_id):
    """A summary says what a session was mostly about; the question may ask for a
    detail only one of its turns holds. Never through another user's turns."""
    other = f"other-{uuid.uuid4().hex[:8]}"
    summary_far = unit(40)
    trip = await _episode(pool, user_id, "Family news and a new job", summary_far)
    await add_turns(pool, user_id, [TURNS[2], TURNS[3], TURNS[4]], episode=trip)
    quiet = await _episode(pool, user_id, "Sorted the tax papers", unit(41))
    await add_turns(pool, user_id, [TURNS[4]], episode=quiet)
    # another user's session holds the very same turn
    theirs = await _episode(pool, other, "Family news and a new job", summary_far)
    await add_turns(pool, other, [TURNS[3]], episode=theirs)

    hits = await recall_episodes(
        pool, query=QUERY, current_user_id=user_id, visible_users=[user_id], query_vector=Q
    )
    # found by its turn alone (the summary has neither the words nor the meaning);
    # the other one is matched by nothing; the other user's never
    assert [h.episode_id for h in hits] == [trip]
    assert hits[0].score == pytest.approx(1.0)
    turns = await rank_turns(
        pool, fusion.EPISODE_TURNS, user_id=user_id, query=QUERY, vector=Q, limit=50
    )
    assert {h.episode_id for h in turns} == {str(trip)}

    # an admin view: the other user's session through its turns' words, x 0.8
    both = await recall_episodes(
        pool,
        query=QUERY,
        current_user_id=user_id,
        visible_users=[user_id, other],
        query_vector=Q,
    )
    assert [h.episode_id for h in both] == [trip, theirs]
    assert both[1].score == pytest.approx(0.8 * both[0].score)


def test_one_fusion_reads_every_spec_field_it_declares():
    """The same candidates under each surface's spec: each rule is a field."""

    def cands() -> list[Candidate[str]]:
        return [
            Candidate("a", rank=0.5, lex_pos=1, distance=0.2, sem_pos=1, owner="me"),
            Candidate("b", rank=0.1, lex_pos=2, distance=0.9, sem_pos=2, owner="you"),
            Candidate("c", distance=0.75, sem_pos=3, owner="me"),
        ]

    nova = {c.id: c.score for c in fuse(fusion.NOVA, cands())}
    assert nova["a"] == pytest.approx(1.0)
    sims = {"a": 1 / 1.2, "b": 1 / 1.9, "c": 1 / 1.75}
    lo, hi = min(sims.values()), max(sims.values())
    assert nova["c"] == pytest.approx(0.7 * (sims["c"] - lo) / (hi - lo))
    ash = {c.id: c.score for c in fuse(fusion.ASH_RECALL, cands())}
    assert ash["b"] == pytest.approx(0.7 * 0.1 + 0.3 * 0.1 / 1.1)
    # Ash's floor: "c" (cosine 0.25) loses its semantic signal and, unmatched, its place
    floored = {c.id for c in fuse(fusion.CONTEXT_MEMORIES, cands())}
    assert floored == {"a", "b"}
    nous = {c.id: c.score for c in fuse(fusion.NOUS_EPISODES, cands(), current_user="me")}
    # "b": cosine 0.1 is under the floor, so text alone (rank / max), another user's
    assert nous["b"] == pytest.approx(0.8 * 0.3 * 0.1 / 0.5)
    assert nous["a"] == pytest.approx(0.7 * 0.8 + 0.3 * 1.0)
    # Nous through turns: an episode's best turn, as a share of the best episode's,
    # four fifths of the score (the summary's 70/30 the other fifth)
    through = [
        Candidate("a", rank=0.5, lex_pos=1, distance=0.2, sem_pos=1, owner="me", turn=0.2),
        Candidate("t", turn=0.4, owner="me"),
    ]
    by_turns = {c.id: c.score for c in fuse(fusion.NOUS_EPISODES, through, current_user="me")}
    assert by_turns["t"] == pytest.approx(0.8 * 1.0)
    assert by_turns["a"] == pytest.approx(0.14 * 0.8 + 0.06 * 1.0 + 0.8 * 0.5)
    rrf = {c.id: c.score for c in fuse(fusion.MESSAGE_MODES["rrf"], cands())}
    assert rrf["a"] == pytest.approx(1.0)
    # what was learned from a turn: w_learned x (cosine - floor) over the turn's score
    learned = [
        Candidate("a", distance=0.2, sem_pos=1, learned=0.8),
        Candidate("b", distance=0.2, sem_pos=2, learned=0.25),
        Candidate("c", distance=0.2, sem_pos=3),
    ]
    lifted = {c.id: c.score for c in fuse(fusion.RankSpec("x", w_learned=0.1), learned)}
    assert lifted["a"] == pytest.approx(lifted["c"] + 0.1 * (0.8 - 0.3))
    assert lifted["b"] == pytest.approx(lifted["c"])  # under the floor: no lift
    # the context's turns: the messages' default with Ash's floor, for every user, and
    # without the learned lift (docs/retrieval.md, "What was learned from a turn")
    assert fusion.CONTEXT_TURNS.but(name="x", min_similarity=None) == fusion.FUSED.but(
        name="x", w_learned=0.0
    )


async def test_nova_s_one_statement_returns_each_signal_s_candidates_in_their_order(pool, user_id):
    """A user searched exactly gets both signals from one statement (BOTH_EXACT): the
    same rows, values and order as the lexical and the exact semantic statement alone,
    past the 50-candidate cut and through ties (equal ranks, equal times)."""
    from services.query.ranking.memories import STATEMENTS

    await pool.execute("INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user_id)
    for i in range(130):
        # the number keeps each text its own memory (migration 0110), the ranks equal
        content = ["hiking trip", "a hiking day", "the trip home", "no match"][i % 4] + f" {i}"
        await pool.execute(
            "INSERT INTO memory_items (user_id, type, content, embedding, embedding_state, "
            "embedding_model, created_at) VALUES ($1, 'fact', $2, $3, 'ready', $4, "
            "'2026-01-01'::timestamptz + make_interval(days => $5))",
            user_id,
            content,
            np.asarray(unit(100 + i % 40, near=Q, noise=1.0), dtype=np.float32),
            MODEL,
            i % 7,
        )
    filters = [user_id, None, "active", None, None, False, None]
    lexical = await pool.fetch(STATEMENTS[("user", "lexical")], *filters, QUERY)
    semantic = await pool.fetch(STATEMENTS[("user", "exact")], *filters, Q)
    both = await pool.fetch(STATEMENTS[("user", "both_exact")], *filters, QUERY, Q)
    assert len(lexical) == len(semantic) == 50
    one_lex = [r for r in both if r["signal"] == 0]
    one_sem = [r for r in both if r["signal"] == 1]
    assert [(r["id"], r["rank"]) for r in one_lex] == [(r["id"], r["rank"]) for r in lexical]
    assert [(r["id"], r["dist"]) for r in one_sem] == [(r["id"], r["dist"]) for r in semantic]
    assert [dict(r) for r in one_lex] == [
        dict(r) | {"signal": 0, "pos": n, "dist": None} for n, r in enumerate(lexical, 1)
    ]


def test_an_unread_memory_fades_by_its_importance_and_last_read():
    """Jarvus's importance and last access, inside the one fusion step (NOVA's fade)."""
    now = datetime.now(UTC)

    def cand(key: str, importance: float, days: float) -> Candidate[str]:
        read = now - timedelta(days=days)
        return Candidate(key, rank=0.5, lex_pos=1, importance=importance, last_read=read)

    scored = {
        c.id: c.score
        for c in fuse(
            fusion.NOVA,
            [cand("read today", 0.5, 0), cand("unread a year", 0.5, 365), cand("vital", 1.0, 365)],
        )
    }
    assert scored["read today"] == pytest.approx(1.0, abs=1e-6)
    assert scored["vital"] == pytest.approx(1.0, abs=1e-6)
    one_year = 1 - 0.4 * 0.5 * (1 - 0.5 ** (365 / 90))
    assert scored["unread a year"] == pytest.approx(one_year)
    assert faded(fusion.NOVA, 0.5, now - timedelta(days=90), now) == pytest.approx(0.9)
    # a surface without the field is untouched
    plain = fuse(fusion.ASH_RECALL, [cand("unread a year", 0.5, 365)])
    assert plain[0].score == pytest.approx(0.5 / 1.5)
