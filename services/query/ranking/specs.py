"""Every search surface's ranking, declared: one ``RankSpec`` per surface.

A seed's rule is a field here, not a code path (``fusion.py`` reads them all):

- ``NOVA``: memory search (API, tools, admin, the
  request/reply search): 70% semantic (``1/(1+d)``) + 30% ``ts_rank``, min-max
  over the union of each signal's top 50; a memory unread for long fades, down
  to 1 - 0.4 x (1 - importance) of its score (half-life 90 days since last read,
  or since stored if never read; Jarvus's importance and last access);
- ``NOVA_RELEVANT``: the browser's search box: ``NOVA`` over only the relevant
  candidates (cosine >= 0.3, Ash's threshold as the context uses it, or a word);
- ``ASH_RECALL``: ``/v1/recall``: 0.7 x cosine + 0.3 x ``rank/(rank+1)``; the
  nearest, the matching and the newest rows are candidates; top N;
- ``CONTEXT_MEMORIES``: ``/v1/context`` memories: Ash's formula, but only
  memories at cosine >= 0.3 or matching a word, and within half of the best;
- ``CONTEXT_TURNS``: ``/v1/context`` past turns: the messages ``fused`` rules,
  with Ash's 0.3 floor on the semantic side, for every user (a big one's BM25
  reads only the turns holding a query word: migration 0090);
- ``NOUS_EPISODES``: episode recall: 20% the summary, 70/30 (cosine,
  ``rank/max``), 80% the episode's best turn under ``EPISODE_TURNS`` (the
  ``fused`` rules); other users' episodes x 0.8 (the current-user boost), a
  relevance floor (Ash's 0.3 on the semantic side of both: an episode or a turn
  is found by meaning only at cosine >= 0.3);
- ``MESSAGE_MODES``: ``/v1/messages/search`` by ``mode``: ``fused`` (the
  default), ``hybrid`` (Nova's), ``rrf``, ``fts``, ``bm25``, ``semantic``.
"""

from __future__ import annotations

from typing import Literal

from services.query.ranking.fusion import RankSpec

# Ash: "Apply similarity threshold (default 0.3) to filter irrelevant messages".
MIN_MESSAGE_SIMILARITY = 0.3

NOVA = RankSpec(
    "memory.search",
    w_sem=0.7,
    w_lex=0.3,
    lexical="ts_rank",
    candidates=50,
    fade=0.4,
    fade_half_life_days=90.0,
)

NOVA_RELEVANT = NOVA.but(name="memory.search.relevant", min_similarity=MIN_MESSAGE_SIMILARITY)
"""The memory browser's search box: Nova's ranking of only the relevant matches, by
the relevance the context uses (``MemoryHit.relevant``): cosine similarity at least
``MIN_MESSAGE_SIMILARITY`` (0.3), or a word of the query in the memory."""

ASH_RECALL = RankSpec(
    "recall",
    w_sem=0.7,
    w_lex=0.3,
    lexical="ts_rank_cd",
    lexical_norm="saturate",
    semantic="cosine",
    semantic_norm="none",
    candidates=0,
    per_hit=4,
    recent_per_hit=1,
)

CONTEXT_MEMORIES = ASH_RECALL.but(
    name="context.memories",
    recent_per_hit=0,
    min_similarity=MIN_MESSAGE_SIMILARITY,
    relative_floor=0.5,
)

MessageMode = Literal["fused", "hybrid", "rrf", "fts", "bm25", "semantic"]

# the messages default: BM25 (speaker included) and cosine, min-max, 0.6 / 0.4, read
# in the conversation, a speaker's burst of messages (each within 5 minutes of the
# last) counted as one unit, the turns of a speaker the query names lifted
# (docs/retrieval.md has the measurements behind each rule)
FUSED = RankSpec(
    "messages.fused",
    w_sem=0.4,
    w_lex=0.6,
    lexical="bm25",
    candidates=100,
    neighbours=(0.5, 0.3, 0.2),
    date_lift=0.3,
    question_keeps=0.7,
    answer_share=0.7,
    short=0.4,
    full_length=20,
    burst_gap_s=300.0,
    reach=12,
)
# ... and in a user's chat with an assistant (``fusion.assistant_chat``: the
# assistant's turns run 3x the user's), what the user said is lifted (0.5), meaning
# weighs more than words (0.6 / 0.4: an assistant's long answers hold most query
# words somewhere), a question of 15+ distinct lexemes is a request that states
# what it is about, not a cue for its answer, and neighbours share less
# (0.3, 0.2, 0.1). BEAM R@10 tune / check 0.502 / 0.450 -> 0.621 / 0.617 (semantic
# alone 0.574 / 0.596); inert on LoCoMo, whose two people write alike
# (docs/retrieval.md, "Issue 27: a chat with an assistant")
FUSED = FUSED.but(
    assistant=FUSED.but(
        name="messages.fused.assistant",
        w_sem=0.6,
        w_lex=0.4,
        user_lift=0.5,
        question_length=15,
        neighbours=(0.3, 0.2, 0.1),
    )
)

# an episode is also found through its own turns: the messages' default ranking, with
# Ash's 0.3 floor on its semantic side (a turn is found by meaning only at cosine >= 0.3)
EPISODE_TURNS = FUSED.but(name="episodes.turns", min_similarity=MIN_MESSAGE_SIMILARITY)

# Nous's 70/30 summary match (cosine, rank / max) is a fifth of the score; four fifths
# are the episode's best turn among the 50 best turns of the user (as a share of the
# best episode's): on LoCoMo the evidence session in the top 3 went 0.424 -> 0.831
# (tuning half) and 0.497 -> 0.836 (check half), docs/retrieval.md
NOUS_EPISODES = RankSpec(
    "episodes",
    w_sem=0.14,
    w_lex=0.06,
    w_turn=0.8,
    turns=EPISODE_TURNS,
    turn_hits=50,
    lexical="ts_rank_cd",
    lexical_norm="max",
    semantic="cosine",
    semantic_norm="clamp",
    candidates=200,
    other_user_factor=0.8,
    min_similarity=MIN_MESSAGE_SIMILARITY,
)

MESSAGE_MODES: dict[MessageMode, RankSpec] = {
    "fused": FUSED,
    # Nova 3.2 as specified: top 50 each
    "hybrid": NOVA.but(name="messages.hybrid", fade=0.0),
    "rrf": RankSpec("messages.rrf", w_sem=1.0, w_lex=1.0, combine="rrf", candidates=100),
    "fts": RankSpec("messages.fts", w_sem=0.0, w_lex=1.0, candidates=100),
    # a long turn read as its passages (BEAM R@10 0.444 / 0.283 -> 0.490 / 0.385;
    # LoCoMo has no turn long enough to have passages: docs/retrieval.md)
    "bm25": RankSpec(
        "messages.bm25",
        w_sem=0.0,
        w_lex=1.0,
        lexical="bm25",
        candidates=100,
        lexical_passages=True,
    ),
    "semantic": RankSpec("messages.semantic", w_sem=1.0, w_lex=0.0, candidates=100),
}

CONTEXT_TURNS = FUSED.but(name="context.turns", min_similarity=MIN_MESSAGE_SIMILARITY)

SURFACES: dict[str, RankSpec] = {
    s.name: s
    for s in (
        NOVA,
        ASH_RECALL,
        CONTEXT_MEMORIES,
        NOUS_EPISODES,
        EPISODE_TURNS,
        CONTEXT_TURNS,
        *MESSAGE_MODES.values(),
    )
}
