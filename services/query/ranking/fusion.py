"""The one fusion step: candidates' signals -> one score, driven by a ``RankSpec``.

Every surface's candidate generators (``memories``, ``recall``, ``episodes``,
``turns``) hand over the same thing: for each candidate row its lexical rank
(``ts_rank``, ``ts_rank_cd`` or BM25, with its position in that list) and its
cosine distance to the query vector (with its position). ``fuse`` turns those
into one score in [0, 1] the same way for all of them; what differs between the
seeds is a field of the surface's ``RankSpec`` (every surface's is declared at the
end of this module), never a second formula:

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
- ``fade``: Jarvus's importance and last access: a memory unread for a while
  scores ``1 - fade * (1 - importance) * (1 - 0.5 ** (days unread / half-life))``
  of its score (never read: days since it was stored; importance 1 never fades);
- ``relative_floor``: hits scoring below that share of the best are dropped;
- the turn rules (``neighbours``, ``date_lift``, ``speaker_lift``,
  ``question_keeps``, ``answer_share``, ``short``, bursts): read a turn in its
  conversation (``_in_conversation``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
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
    # turns: BM25 reads a long turn as its passages (migrations 0160-0161), the
    # turn scoring its best passage's; a turn without passages is one document as
    # before. And the semantic side reads a long turn's best vector, its own or a
    # passage's (tried, not kept on any surface: docs/retrieval.md)
    lexical_passages: bool = False
    semantic_passages: bool = False
    lexical_norm: Literal["minmax", "saturate", "max", "spread"] = "minmax"
    semantic: Literal["inverse_distance", "cosine"] = "inverse_distance"
    semantic_norm: Literal["minmax", "none", "clamp", "spread"] = "minmax"
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
    # Jarvus: how much an unread memory's score fades (0 = none), and the half-life
    # in days of its freshness since it was last read (or stored, if never read)
    fade: float = 0.0
    fade_half_life_days: float = 90.0
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
    # bursts: consecutive turns of one speaker, each at most ``burst_gap_s`` after the
    # one before, are one unit for the turn rules: neighbours are counted in such
    # units (the turn 1 unit away is the other speaker's reply), a turn gains
    # ``burst_share`` of the best turn of its own burst, and a question's answer is
    # the next unit; 0 = every turn is its own unit
    # the lift of a turn whose speaker's name is one of the query's words
    speaker_lift: float = 0.0
    burst_gap_s: float = 0.0
    burst_share: float = 0.0
    # the short-turn rule reads the length of the turn's whole burst
    burst_length: bool = False
    # how many turns are read on each side of a candidate (at least one per share)
    reach: int = 0
    # the lift of a turn the chat's user wrote (role ``user``) in a chat that also
    # holds another role's turns (an assistant's)
    user_lift: float = 0.0
    # ... where the question asks what the assistant said (``asks_assistant``: "how did
    # you recommend ...", "what did you suggest"), the lift goes to the assistant's turns
    # instead, this much (None: the user's turns are lifted whatever the question asks)
    assistant_asked_lift: float | None = None
    # a turn ending in a question mark with at least this many distinct lexemes is
    # read as a statement (it keeps its score and hands none to its answer): a
    # request that carries what it is about (0 = every such turn is a question)
    question_length: int = 0
    # a turn gains ``w_learned`` x (cosine - ``learned_floor``) when a memory learned
    # from it (a fact the extractor stated on its own, names resolved) is that close
    # to the query: what the turn said, as a sentence that stands alone
    w_learned: float = 0.0
    learned_floor: float = 0.3
    # turns: the rules for a chat with an assistant (``assistant_chat``), where the
    # user's own turns carry what they said and the assistant's long answers match
    # every query a little; it differs from this spec only in how it scores (never
    # in the candidates it reads), and ``but`` changes both alike
    assistant: RankSpec | None = None

    def __post_init__(self) -> None:
        a = self.assistant
        if a is not None and _reads(a) != _reads(self):
            raise ValueError(f"{self.name}: its assistant rules must read the same candidates")

    def k(self, limit: int) -> int:
        """How many candidates each signal brings for ``limit`` hits."""
        return max(self.candidates, limit * self.per_hit)

    def but(self, **changes: Any) -> RankSpec:
        """This spec with some fields changed (a surface's variant); its assistant
        rules get the same changes."""
        if self.assistant is not None and "assistant" not in changes:
            inner = {k: v for k, v in changes.items() if k != "name"}
            if "name" in changes:
                inner["name"] = f"{changes['name']}.assistant"
            changes["assistant"] = self.assistant.but(**inner)
        return replace(self, **changes)

    def for_chat(self, candidates: Sequence[Candidate[Any]]) -> RankSpec:
        """The rules for the chat the candidates come from (``assistant_chat``)."""
        if self.assistant is not None and assistant_chat(candidates):
            return self.assistant
        return self

    @property
    def reads_turns(self) -> bool:
        return bool(self.neighbours) or self.date_lift > 0 or self.short > 0

    @property
    def turns_read(self) -> int:
        """Turns read on each side of a candidate."""
        return max(self.reach, len(self.neighbours))


def _reads(spec: RankSpec) -> tuple[Any, ...]:
    """The fields that decide which candidate rows a turn search reads."""
    return (
        spec.lexical,
        spec.lexical_passages,
        spec.semantic_passages,
        spec.candidates,
        spec.per_hit,
        spec.turns_read,
        spec.w_lex > 0,
        spec.w_sem > 0,
        spec.date_lift > 0,
        spec.w_learned > 0,
    )


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
    named: bool = False  # the query names the turn's speaker
    learned: float | None = None  # the best cosine of what was learned from the turn
    before: tuple[K, ...] = ()
    after: tuple[K, ...] = ()
    # who wrote the turn and its neighbours, and when (for bursts)
    speaker: str | None = None
    before_speakers: tuple[str | None, ...] = ()
    after_speakers: tuple[str | None, ...] = ()
    before_at: tuple[datetime, ...] = ()
    after_at: tuple[datetime, ...] = ()
    before_lengths: tuple[int, ...] = ()
    after_lengths: tuple[int, ...] = ()
    score: float = 0.0
    similarity: float | None = None
    found: bool = True  # False: a turn reached only as a neighbour
    turn: float | None = None  # the best score of the row's own turns (an episode's)
    # memories only: Jarvus's importance and when it was last read (or stored)
    importance: float | None = None
    last_read: datetime | None = None
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
    if how == "spread":
        # distribution-based: the mean +- 3 standard deviations of the candidates'
        # values map to 0..1 (clamped), so one outlier does not squash the rest
        n = len(values)
        mean = sum(values.values()) / n
        sd = (sum((v - mean) ** 2 for v in values.values()) / n) ** 0.5
        if sd == 0:
            return dict.fromkeys(values, 1.0)
        lo = mean - 3 * sd
        return {k: min(1.0, max(0.0, (v - lo) / (6 * sd))) for k, v in values.items()}
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
    asks_assistant: bool = False,
) -> list[Candidate[K]]:
    """Score the admitted candidates (``score`` set on each), unsorted.

    ``periods``: the query names a calendar period (the ceiling of a turn score
    includes the date lift only then); ``asks_assistant``: it asks what the
    assistant said (:func:`asks_assistant`)."""
    cands = admit(spec, candidates)
    now = datetime.now(UTC)
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
        if spec.fade and c.last_read is not None and c.importance is not None:
            score *= faded(spec, c.importance, c.last_read, now)
        c.score = score
    if spec.reads_turns:
        cands = _in_conversation(spec, cands, periods, asks_assistant)
    if spec.w_learned > 0:
        for c in cands:
            if c.learned is not None and c.learned > spec.learned_floor:
                c.score += spec.w_learned * (c.learned - spec.learned_floor)
    return cands


def faded(spec: RankSpec, importance: float, last_read: datetime, now: datetime) -> float:
    """The share of its score an unread memory keeps (``fade`` in the module doc)."""
    days = max(0.0, (now - last_read).total_seconds() / 86_400)
    stale = 1.0 - float(0.5 ** (days / spec.fade_half_life_days))
    return 1.0 - spec.fade * (1.0 - min(1.0, max(0.0, importance))) * stale


def _units(
    spec: RankSpec,
    c: Candidate[K],
    ids: tuple[K, ...],
    speakers: tuple[str | None, ...],
    ats: tuple[datetime, ...],
) -> list[tuple[K, int]]:
    """The turns on one side of ``c`` with how many units away each is (0: in
    ``c``'s own burst), as far as the last neighbour share reaches."""
    out: list[tuple[K, int]] = []
    if not spec.burst_gap_s or c.speaker is None or len(speakers) != len(ids):
        return [(n, d) for d, n in enumerate(ids[: len(spec.neighbours)], 1)]
    unit = 0
    who: str | None = c.speaker
    at: datetime | None = c.occurred_at
    times: tuple[datetime | None, ...] = ats if len(ats) == len(ids) else (None,) * len(ids)
    for n, s, t in zip(ids, speakers, times, strict=True):
        near = at is None or t is None or abs((t - at).total_seconds()) <= spec.burst_gap_s
        if s != who or not near:
            unit += 1
        if unit > len(spec.neighbours):
            break
        out.append((n, unit))
        who, at = s, t
    return out


def _burst_length(spec: RankSpec, c: Candidate[K]) -> int:
    """The lengths of the other turns of ``c``'s burst."""
    out = 0
    for ids, who, ats, lengths in (
        (c.before, c.before_speakers, c.before_at, c.before_lengths),
        (c.after, c.after_speakers, c.after_at, c.after_lengths),
    ):
        of = dict(zip(ids, lengths, strict=False))
        out += sum(of.get(n, 0) for n, d in _units(spec, c, ids, who, ats) if d == 0)
    return out


def asks(spec: RankSpec, c: Candidate[K]) -> bool:
    """Whether ``c`` is a question for the turn rules (``question_length``)."""
    return c.asks and (not spec.question_length or c.length < spec.question_length)


def answer_of(spec: RankSpec, c: Candidate[K]) -> tuple[K, ...]:
    """The turns that answer ``c`` if it asks a question: the one right after it, or
    under bursts the first burst of another speaker after it (its reply), whatever
    the asker wrote in between."""
    if not asks(spec, c) or not c.after:
        return ()
    if not spec.burst_gap_s:
        return (c.after[0],)
    who = dict(zip(c.after, c.after_speakers, strict=False))
    reply: int | None = None
    out: list[K] = []
    for n, d in _units(spec, c, c.after, c.after_speakers, c.after_at):
        if reply is None and who.get(n) != c.speaker:
            reply = d
        if reply is not None:
            if d != reply:
                break
            out.append(n)
    return tuple(out)


def _in_conversation(
    spec: RankSpec, cands: list[Candidate[K]], periods: bool, asks_assistant: bool = False
) -> list[Candidate[K]]:
    """Fused's turn rules: lift a turn in a named period, scale down a short one, let
    a question keep part of its score, and give every turn a share of the best
    turn 1, 2, ... places (or bursts) before or after it and of its own burst's
    best (the turns answering a question gain ``answer_share``); divided by the
    largest score a turn could reach."""
    lifted: dict[K, float] = {}
    # the user's lift (or, asked what the assistant said, the assistant's) applies where
    # another role speaks too (an assistant's chat)
    role, role_lift = "user", spec.user_lift
    if asks_assistant and spec.assistant_asked_lift is not None:
        role, role_lift = "assistant", spec.assistant_asked_lift
    lifts_role = role_lift > 0 and _mixed_roles(cands)
    for c in cands:
        base = c.score + (spec.date_lift if c.in_period else 0.0)
        base += spec.speaker_lift if c.named else 0.0
        base += role_lift if lifts_role and _role(c.speaker) == role else 0.0
        length = c.length + (_burst_length(spec, c) if spec.burst_length else 0)
        scale = 1.0 - spec.short + spec.short * min(1.0, length / spec.full_length)
        lifted[c.id] = base * scale
    own = {c.id: (spec.question_keeps if asks(spec, c) else 1.0) * lifted[c.id] for c in cands}
    shares = (spec.burst_share, *spec.neighbours)
    best_near: dict[tuple[K, int], float] = {}
    for c in cands:
        answers = set(answer_of(spec, c)) if spec.answer_share > 0 else set()
        for ids, who, ats in (
            (c.before, c.before_speakers, c.before_at),
            (c.after, c.after_speakers, c.after_at),
        ):
            for n, dist in _units(spec, c, ids, who, ats):
                share = shares[dist]
                if n in answers:
                    share = max(spec.answer_share, share)
                part = share * lifted[c.id]
                best_near[(n, dist)] = max(best_near.get((n, dist), part), part)
    top = 1.0 + (spec.date_lift if periods else 0.0) + spec.speaker_lift + sum(spec.neighbours)
    top += role_lift if lifts_role else 0.0
    if spec.neighbours:
        top += max(spec.answer_share - spec.neighbours[0], 0.0)
    if spec.burst_gap_s:
        top += spec.burst_share
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


# An assistant's chat: its ``assistant`` turns run this many times the user's (the
# medians of their lengths in distinct lexemes, over the candidates and the turns
# read around them, at least ``ASSISTANT_TURNS`` of each). An assistant answers at
# length (BEAM: median 150 against the user's 22); two people chatting write alike
# (LoCoMo: 11 and 12, whichever role the second person is given).
ASSISTANT_RATIO = 2.0
ASSISTANT_TURNS = 3


# A question about what the assistant said before: "how did you recommend ...", "what
# did you suggest", "you mentioned", "your advice"; not a request made now ("what would
# you suggest", "can you show me"), which is about the user's own situation.
_ASKS_ASSISTANT = re.compile(
    r"\b(?:did|have|had) you\b"
    r"|\byou (?:recommended|suggested|advised|proposed|said|told|mentioned|explained"
    r"|described|gave|shared|provided|outlined|showed|walked)\b"
    r"|\byour (?:earlier |previous |last )?(?:advice|recommendations?|suggestions?"
    r"|explanation|answer)\b",
    re.IGNORECASE,
)


def asks_assistant(query: str) -> bool:
    """Whether ``query`` asks what the assistant (the one it speaks to) said before."""
    return _ASKS_ASSISTANT.search(query) is not None


def assistant_chat(candidates: Iterable[Candidate[Any]]) -> bool:
    """Whether the candidates' turns read as a user's chat with an assistant."""
    # each turn once (a neighbour of many candidates is read many times), by its speaker
    seen: dict[Any, tuple[str | None, int]] = {}
    for c in candidates:
        seen[c.id] = (c.speaker, c.length)
        for ids, whos, ns in (
            (c.before, c.before_speakers, c.before_lengths),
            (c.after, c.after_speakers, c.after_lengths),
        ):
            seen.update(zip(ids, zip(whos, ns, strict=False), strict=False))
    by_who: dict[str | None, list[int]] = {}
    for who, n in seen.values():
        by_who.setdefault(who, []).append(n)
    lengths: dict[str | None, list[int]] = {"user": [], "assistant": []}
    for who, counts in by_who.items():
        lengths.get(_role(who), []).extend(counts)
    user, assistant = sorted(lengths["user"]), sorted(lengths["assistant"])
    if len(user) < ASSISTANT_TURNS or len(assistant) < ASSISTANT_TURNS:
        return False
    return assistant[len(assistant) // 2] >= ASSISTANT_RATIO * max(user[len(user) // 2], 1)


def _mixed_roles(cands: list[Candidate[K]]) -> bool:
    """Whether the user and another role both speak among the candidates' turns."""
    whos = {c.speaker for c in cands}
    for c in cands:
        whos.update(c.before_speakers)
        whos.update(c.after_speakers)
    roles = {_role(w) for w in whos} - {None}
    return "user" in roles and len(roles) > 1


def _role(who: str | None) -> str | None:
    """The role of a turn's ``who`` (``role:display name``)."""
    return None if who is None else who.split(":", 1)[0]


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


# ---------------------------------------------------------------------------
# Every search surface's ranking, declared: one ``RankSpec`` per surface, beside
# ``RankSpec`` itself (so every search stands one level above them both). A seed's
# rule is a field here, not a code path:
#
# - ``NOVA``: memory search (API, tools, admin, the
#   request/reply search): 70% semantic (``1/(1+d)``) + 30% ``ts_rank``, min-max
#   over the union of each signal's top 50; a memory unread for long fades, down
#   to 1 - 0.4 x (1 - importance) of its score (half-life 90 days since last read,
#   or since stored if never read; Jarvus's importance and last access);
# - ``NOVA_RELEVANT``: the browser's search box: ``NOVA`` over only the relevant
#   candidates (cosine >= 0.3, Ash's threshold as the context uses it, or a word);
# - ``ASH_RECALL``: ``/v1/recall``: 0.7 x cosine + 0.3 x ``rank/(rank+1)``; the
#   nearest, the matching and the newest rows are candidates; top N;
# - ``CONTEXT_MEMORIES``: ``/v1/context`` memories: Ash's formula, but only
#   memories at cosine >= 0.3 or matching a word, and within half of the best;
# - ``CONTEXT_TURNS``: ``/v1/context`` past turns: the messages ``fused`` rules,
#   with Ash's 0.3 floor on the semantic side, for every user (a big one's BM25
#   reads only the turns holding a query word: migration 0090);
# - ``NOUS_EPISODES``: episode recall: 20% the summary, 70/30 (cosine,
#   ``rank/max``), 80% the episode's best turn under ``EPISODE_TURNS`` (the
#   ``fused`` rules); other users' episodes x 0.8 (the current-user boost), a
#   relevance floor (Ash's 0.3 on the semantic side of both: an episode or a turn
#   is found by meaning only at cosine >= 0.3);
# - ``MESSAGE_MODES``: ``/v1/messages/search`` by ``mode``: ``fused`` (the
#   default), ``hybrid`` (Nova's), ``rrf``, ``fts``, ``bm25``, ``semantic``.

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
    # what was learned from a turn lifts it: R@10 LoCoMo 1-4 0.779 / 0.751 -> 0.786 /
    # 0.756, BEAM 0.615 / 0.615 -> 0.626 / 0.626 (tune / check; docs/retrieval.md,
    # "What was learned from a turn")
    w_learned=0.1,
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
        # a question about what the assistant said lifts neither role: BEAM R@10 tune /
        # check 0.636 / 0.619 -> 0.640 / 0.624 (information_extraction 0.717 / 0.700 ->
        # 0.750 / 0.750); no LoCoMo question asks it (docs/retrieval.md, "What the
        # assistant said")
        assistant_asked_lift=0.0,
    )
)

# an episode is also found through its own turns: the messages' default ranking, with
# Ash's 0.3 floor on its semantic side (a turn is found by meaning only at cosine >= 0.3)
# (without the learned lift: episode recall gained on LoCoMo, not on BEAM's check half)
EPISODE_TURNS = FUSED.but(
    name="episodes.turns", min_similarity=MIN_MESSAGE_SIMILARITY, w_learned=0.0
)

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

# what was learned from a turn does not lift it here: in the context the rule gained
# on neither set's check half at 1,000 tokens (docs/retrieval.md, "What was learned
# from a turn")
CONTEXT_TURNS = FUSED.but(
    name="context.turns", min_similarity=MIN_MESSAGE_SIMILARITY, w_learned=0.0
)

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
