"""Bursts: consecutive turns of one speaker are one unit for the default's turn rules.

Real chats are not LoCoMo's strict turn-taking: people send several short
messages in a row, and a reply is the other speaker's next burst, not the next
message. On real PostgreSQL through POST /v1/messages/search (the default,
``fused``), and on ``fuse`` itself for the unit arithmetic.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.query.app import create_app
from services.query.ranking.fusion import FUSED, Candidate, answer_of, fuse
from services.query.settings import QuerySettings
from tests.query.helpers import FixedEmbedder, auth, resolver_for, unit
from tests.retrieval.helpers import T, add_turns
from tests.support import running

Q = unit(1)
T0 = datetime(2024, 3, 2, 18, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def _order(make_settings, pool, user_id, query):
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({query: Q})))
    async with running(app) as client:
        r = await client.post(
            "/v1/messages/search",
            headers=await auth(pool, user_id),
            json={"query": query},
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "fused"
    assert all(0.0 <= h["score"] <= 1.0 for h in body["results"])
    return [h["id"] for h in body["results"]], {h["id"]: h["score"] for h in body["results"]}


async def test_the_answer_to_a_question_is_the_other_speakers_reply_after_the_askers_burst(
    make_settings, pool, user_id
):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("did you finish the pottery class?", Q, speaker="Ann", at=_at(0)),
            T("I keep meaning to sign up myself", speaker="Ann", at=_at(5)),
            T("no rush though", speaker="Ann", at=_at(9)),
            T(
                "yes! I made a bowl, two mugs and a vase",
                speaker="Bob",
                role="assistant",
                at=_at(60),
            ),
        ],
    )
    await add_turns(pool, user_id, [T("unrelated", unit(22))])
    order, score = await _order(make_settings, pool, user_id, "pottery class")
    # the reply three messages later, not the asker's own next message, gets the
    # answer's share: it ranks with the question, above the asker's burst
    assert set(order[:2]) == {ids[0], ids[3]}
    assert score[ids[3]] > score[ids[1]] and score[ids[3]] > score[ids[2]]


async def test_neighbours_are_counted_in_bursts_not_messages(make_settings, pool, user_id):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("we planned the hiking trip for weeks", Q, speaker="Ann", at=_at(0)),
            T("nice", speaker="Bob", role="assistant", at=_at(30)),
            T("sounds like fun", speaker="Bob", role="assistant", at=_at(32)),
            T("where did you end up going", speaker="Bob", role="assistant", at=_at(35)),
            T("I'd love to come along next time", speaker="Bob", role="assistant", at=_at(40)),
            T("the Alps, near Chamonix", speaker="Ann", at=_at(90)),
        ],
    )
    order, score = await _order(make_settings, pool, user_id, "hiking trip")
    # the other speaker's whole burst is one unit away, Ann's next message two:
    # five messages away, it is still reached (the messages' count stops at three)
    assert set(ids) <= set(order)
    assert order[0] == ids[0]
    assert score[ids[4]] == score[ids[1]] > score[ids[5]] > 0


def _turn(i: int, who: str, seconds: float, *, asks: bool = False, score: float = 0.0):
    """A turn the lexical side found with rank ``score`` (so ``fuse`` admits and scores it)."""
    return Candidate(
        i, rank=score, lex_pos=i, asks=asks, speaker=who, occurred_at=_at(seconds), length=20
    )


def _linked(turns: list[Candidate[int]]) -> list[Candidate[int]]:
    for i, c in enumerate(turns):
        c.before = tuple(t.id for t in reversed(turns[:i]))
        c.before_speakers = tuple(t.speaker for t in reversed(turns[:i]))
        c.before_at = tuple(t.occurred_at for t in reversed(turns[:i]) if t.occurred_at)
        c.after = tuple(t.id for t in turns[i + 1 :])
        c.after_speakers = tuple(t.speaker for t in turns[i + 1 :])
        c.after_at = tuple(t.occurred_at for t in turns[i + 1 :] if t.occurred_at)
    return turns


def test_a_pause_ends_a_burst():
    spec = FUSED
    gap = spec.burst_gap_s
    assert gap > 0
    # Ann asks, then writes again after a pause longer than a burst's gap, then Bob
    # replies: Ann's later message is a unit of its own, Bob's reply is the answer
    turns = _linked(
        [
            _turn(1, "user:Ann", 0, asks=True),
            _turn(2, "user:Ann", gap + 60),
            _turn(3, "assistant:Bob", gap + 70),
        ]
    )
    assert answer_of(spec, turns[0]) == (3,)
    # within the gap the same two messages are one burst
    turns = _linked(
        [
            _turn(1, "user:Ann", 0, asks=True),
            _turn(2, "user:Ann", gap - 1),
            _turn(3, "assistant:Bob", gap + 10),
        ]
    )
    assert answer_of(spec, turns[0]) == (3,)


def test_strict_turn_taking_ranks_as_before_bursts():
    # with no two consecutive messages from one speaker, every burst is a message:
    # the same scores as counting messages
    def conversation():
        return _linked(
            [
                _turn(i, "user:Ann" if i % 2 else "assistant:Bob", 10 * i, score=s)
                for i, s in enumerate((0.2, 0.9, 0.1, 0.0, 0.4, 0.3, 0.0, 0.0), 1)
            ]
        )

    def scores(spec):
        return {c.id: round(c.score, 9) for c in fuse(spec, conversation())}

    by_bursts = scores(FUSED)
    assert len(by_bursts) == 8 and len(set(by_bursts.values())) > 2
    assert by_bursts == scores(FUSED.but(burst_gap_s=0.0, burst_share=0.0))


def test_the_speaker_lift_is_off_by_default_and_lifts_the_named_speaker_when_set():
    # two equal turns far apart, the query naming the second one's speaker
    def conversation():
        a = _turn(1, "user:Ann", 0, score=0.5)
        b = _turn(2, "assistant:Bob", 3600, score=0.5)
        b.named = True
        return [a, b]

    def scores(spec):
        return {c.id: round(c.score, 9) for c in fuse(spec, conversation())}

    assert FUSED.speaker_lift == 0.0  # measured, not kept (docs/retrieval.md)
    default = scores(FUSED)
    assert default[1] == default[2]
    lifted = scores(FUSED.but(speaker_lift=0.2))
    assert lifted[2] > lifted[1]
