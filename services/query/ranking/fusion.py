"""The one fusion step: candidates' signals -> one score, driven by a ``RankSpec``.

Every surface's candidate generators (``memories``, ``recall``, ``episodes``,
``turns``) hand over the same thing: for each candidate row its lexical rank
(``ts_rank``, ``ts_rank_cd`` or BM25, with its position in that list) and its
cosine distance to the query vector (with its position). ``fuse`` turns those
into one score in [0, 1] the same way for all of them; what differs between the
seeds is a field of the surface's ``RankSpec`` (``ranking/specs.py``), never a
second formula:

- ``semantic``: the distance as Nova's ``1 / (1 + d)`` or as the cosine
  similarity ``1 - d``; ``min_similarity`` (Ash's 0.3) drops semantic candidates
  whose cosine similarity is below it;
- ``semantic_norm`` / ``lexical_norm``: min-max over the candidate set (Nova),
  none (raw cosine, Ash), clamped at 0 (raw cosine, Nous), ``rank / (rank + 1)``
  (Ash's text side) or ``rank / max`` (Nous's text side);
- ``combine``: ``w_sem * semantic + w_lex * lexical`` (divided by the weights in
  play, so a signal with no candidate at all drops out and the other alone still
  scores in [0, 1]), or reciprocal-rank fusion ``Σ w / (60 + position)``;
- ``w_turn`` / ``turns``: a row that holds turns (an episode) is also scored by
  its best turn under the ``turns`` spec (the messages' own ranking), as a share
  of the best such turn among the candidates, weighted beside the other two;
- ``other_user_factor``: Nous's current-user boost (others' scores times it);
- ``relative_floor``: hits scoring below that share of the best are dropped;
- the turn rules (``neighbours``, ``date_lift``, ``question_keeps``,
  ``answer_share``, ``short``): read a turn in its conversation (``context``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60.0


@dataclass(frozen=True)
class RankSpec:
    """How one surface turns candidates into a ranking (see the module doc)."""

    name: str
    w_sem: float = 0.7
    w_lex: float = 0.3
    combine: Literal["weighted", "rrf"] = "weighted"
    lexical: Literal["ts_rank", "ts_rank_cd", "bm25"] = "ts_rank"
    lexical_norm: Literal["minmax", "saturate", "max"] = "minmax"
    semantic: Literal["inverse_distance", "cosine"] = "inverse_distance"
    semantic_norm: Literal["minmax", "none", "clamp"] = "minmax"
    # a user whose turns are in the HNSW index (more than 5,000: vector_index.py):
    # BM25 reads every one of their turns per query, and ts_rank every match; under
    # "ts_rank" / "none" such a user's lexical side is ts_rank, or none at all
    big_user_lexical: Literal["same", "ts_rank", "none"] = "same"
    # candidates taken from each signal: at least ``candidates``, and ``per_hit``
    # times the hits asked for; the newest ``recent_per_hit`` times them too
    candidates: int = 50
    per_hit: int = 1
    recent_per_hit: int = 0
    # Ash: semantic candidates under this cosine similarity are no candidates
    min_similarity: float | None = None
    # hits under this share of the best hit's score are dropped (0 = none)
    relative_floor: float = 0.0
    # Nous: a row of another user than the caller scores this share of its score
    other_user_factor: float = 1.0
    # a row holding turns (an episode) found through them: the weight of its best
    # turn's score under ``turns`` (the messages' ranking), read from ``turn_hits`` turns
    w_turn: float = 0.0
    turns: RankSpec | None = None
    turn_hits: int = 50
    # turn rules: the share of a neighbour's score 1, 2, ... turns away; the lift
    # of a turn inside a period the query names; the share of its own score a
    # question keeps and the share of it the turn right after gains; how much a
    # short turn loses and the length (distinct lexemes) past which none is lost
    neighbours: tuple[float, ...] = ()
    date_lift: float = 0.0
    question_keeps: float = 1.0
    answer_share: float = 0.0
    short: float = 0.0
    full_length: int = 20

    def k(self, limit: int) -> int:
        """How many candidates each signal brings for ``limit`` hits."""
        return max(self.candidates, limit * self.per_hit)

    def but(self, **changes: Any) -> RankSpec:
        """This spec with some fields changed (a surface's variant)."""
        return replace(self, **changes)

    @property
    def reads_turns(self) -> bool:
        return bool(self.neighbours) or self.date_lift > 0 or self.short > 0


@dataclass
class Candidate(Generic[K]):
    """One candidate row's signals; ``rank``/``distance`` None: not found by that signal."""

    id: K
    rank: float | None = None
    lex_pos: int | None = None
    distance: float | None = None
    sem_pos: int | None = None
    owner: str | None = None
    # turns only: where the turn is and what it looks like
    occurred_at: datetime | None = None
    asks: bool = False
    length: int = 0
    in_period: bool = False
    before: tuple[K, ...] = ()
    after: tuple[K, ...] = ()
    score: float = 0.0
    similarity: float | None = None
    found: bool = True  # False: a turn reached only as a neighbour
    turn: float | None = None  # the best score of the row's own turns (an episode's)
    extra: dict[str, Any] = field(default_factory=dict)


def cosine(distance: float | None) -> float | None:
    return None if distance is None else 1.0 - distance


def _semantic_value(spec: RankSpec, distance: float) -> float:
    if spec.semantic == "cosine":
        return 1.0 - distance
    return 1.0 / (1.0 + distance)


def _normalise(values: dict[K, float], how: str) -> dict[K, float]:
    if not values:
        return {}
    if how == "none":
        return values
    if how == "clamp":
        return {k: max(v, 0.0) for k, v in values.items()}
    if how == "saturate":
        return {k: v / (v + 1.0) for k, v in values.items()}
    if how == "max":
        hi = max(values.values())
        return {k: (v / hi if hi > 0 else 0.0) for k, v in values.items()}
    lo, hi = min(values.values()), max(values.values())
    if hi == lo:
        return dict.fromkeys(values, 1.0)
    return {k: (v - lo) / (hi - lo) for k, v in values.items()}


def admit(spec: RankSpec, candidates: Iterable[Candidate[K]]) -> list[Candidate[K]]:
    """The candidates the spec lets in: a signal with no weight brings none, a
    semantic candidate under ``min_similarity`` loses that signal, and a row no
    signal found (a lexical rank of 0 read for every candidate) is only in under
    a spec that takes the newest rows too."""
    out = []
    for c in candidates:
        c.similarity = cosine(c.distance)
        if spec.min_similarity is not None and c.similarity is not None:
            if c.similarity < spec.min_similarity:
                c.distance, c.sem_pos = None, None
        if spec.w_sem <= 0:
            c.distance, c.sem_pos = None, None
        if spec.w_lex <= 0:
            c.rank, c.lex_pos = None, None
        if spec.w_turn <= 0:
            c.turn = None
        matched = c.rank is not None and (c.rank > 0 or c.lex_pos is not None)
        if c.distance is not None or matched or c.turn is not None or spec.recent_per_hit > 0:
            out.append(c)
    return out


def fuse(
    spec: RankSpec,
    candidates: Iterable[Candidate[K]],
    *,
    current_user: str | None = None,
    periods: bool = False,
) -> list[Candidate[K]]:
    """Score the admitted candidates (``score`` set on each), unsorted.

    ``periods``: the query names a calendar period (the ceiling of a turn score
    includes the date lift only then)."""
    cands = admit(spec, candidates)
    lex = {c.id: c.rank for c in cands if c.rank is not None}
    sem = {c.id: _semantic_value(spec, c.distance) for c in cands if c.distance is not None}
    turn = {c.id: c.turn for c in cands if c.turn is not None}
    w_sem = spec.w_sem if sem else 0.0
    w_lex = spec.w_lex if lex else 0.0
    w_turn = spec.w_turn if turn else 0.0
    lex_n = _normalise(lex, spec.lexical_norm)
    sem_n = _normalise(sem, spec.semantic_norm)
    turn_n = _normalise(turn, "max")
    for c in cands:
        if w_sem + w_lex + w_turn == 0:
            score = 0.0
        elif spec.combine == "rrf":
            s = w_sem / (RRF_K + c.sem_pos) if c.sem_pos is not None else 0.0
            s += w_lex / (RRF_K + c.lex_pos) if c.lex_pos is not None else 0.0
            score = s / ((w_sem + w_lex) / (RRF_K + 1.0)) if w_sem + w_lex else 0.0
        else:
            score = (
                w_sem * sem_n.get(c.id, 0.0)
                + w_lex * lex_n.get(c.id, 0.0)
                + w_turn * turn_n.get(c.id, 0.0)
            ) / (w_sem + w_lex + w_turn)
        if current_user is not None and c.owner is not None and c.owner != current_user:
            score *= spec.other_user_factor
        c.score = score
    if spec.reads_turns:
        cands = _in_conversation(spec, cands, periods)
    return cands


def _in_conversation(
    spec: RankSpec, cands: list[Candidate[K]], periods: bool
) -> list[Candidate[K]]:
    """Fused's turn rules: lift a turn in a named period, scale down a short one, let
    a question keep part of its score, and give every turn a share of the best
    turn 1, 2, ... places before or after it (the turn right after a question
    gains ``answer_share``); divided by the largest score a turn could reach."""
    lifted: dict[K, float] = {}
    for c in cands:
        base = c.score + (spec.date_lift if c.in_period else 0.0)
        scale = 1.0 - spec.short + spec.short * min(1.0, c.length / spec.full_length)
        lifted[c.id] = base * scale
    own = {c.id: (spec.question_keeps if c.asks else 1.0) * lifted[c.id] for c in cands}
    best_near: dict[tuple[K, int], float] = {}
    for c in cands:
        for dist, n in enumerate(c.before[: len(spec.neighbours)], 1):
            part = spec.neighbours[dist - 1] * lifted[c.id]
            best_near[(n, dist)] = max(best_near.get((n, dist), part), part)
        for dist, n in enumerate(c.after[: len(spec.neighbours)], 1):
            share = spec.neighbours[dist - 1]
            if dist == 1 and c.asks:
                share = max(spec.answer_share, share)
            part = share * lifted[c.id]
            best_near[(n, dist)] = max(best_near.get((n, dist), part), part)
    top = 1.0 + (spec.date_lift if periods else 0.0) + sum(spec.neighbours)
    if spec.neighbours:
        top += max(spec.answer_share - spec.neighbours[0], 0.0)
    total: dict[K, float] = dict(own)
    for (n, _), part in best_near.items():
        total[n] = total.get(n, 0.0) + part
    by_id = {c.id: c for c in cands}
    out: list[Candidate[K]] = []
    for k, s in total.items():
        # a turn found only as a neighbour has no signal of its own
        c = by_id[k] if k in by_id else Candidate(k, found=False)
        c.score = s / top
        out.append(c)
    return out


def ranked(
    spec: RankSpec,
    scored: Sequence[Candidate[K]],
    limit: int,
    *,
    tie: Callable[[Candidate[K]], Any],
) -> list[Candidate[K]]:
    """Best first (ties by ``tie``, ascending), the relative floor applied, top ``limit``."""
    order = sorted(scored, key=tie)
    order.sort(key=lambda c: c.score, reverse=True)
    if spec.relative_floor > 0 and order:
        floor = spec.relative_floor * order[0].score
        order = [c for c in order if c.score >= floor]
    return order[:limit]
