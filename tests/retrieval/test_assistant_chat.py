"""A user's chat with an assistant: what the user said outranks an answer that holds the words.

An assistant answers at length, so its turns hold most of any question's words
somewhere; the user's own short turns hold what they said (a date, a number, a
preference). ``FUSED`` reads a chat whose assistant turns run at least twice the
user's as such a chat (``fusion.assistant_chat``) and scores it by its
``assistant`` rules; two people chatting (whatever role the second is given) keep
the people's rules. On real PostgreSQL through ``POST /v1/messages/search``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.query.app import create_app
from services.query.ranking.fusion import FUSED, Candidate, asks_assistant, assistant_chat
from services.query.ranking.turns import rank_turns
from services.query.settings import QuerySettings
from tests.query.helpers import FixedEmbedder, auth, resolver_for, unit
from tests.retrieval.helpers import T, add_turns
from tests.support import running

Q = unit(1)
QUERY = "When does my first sprint end?"
T0 = datetime(2024, 3, 4, 9, tzinfo=UTC)

# an assistant's answer: long, about sprints, naming "first", "sprint" and "end" often
ANSWER = (
    "Here is a plan for your first sprint and the ones after it. A sprint should end "
    "with a review: list what the first sprint delivered, what slipped, and what the "
    "next sprint picks up. Keep the sprint backlog small, estimate tasks in hours, "
    "track blockers daily, and at the end of each sprint hold a retrospective. "
    "Typical sprint lengths are one to four weeks; teams starting out often choose "
    "two. Define done for every story before the sprint starts, and protect the "
    "sprint from new scope so it can end on time with a working increment."
)


def _answer(text: str, seed: int, noise: float, at: datetime) -> T:
    return T(text, unit(seed, near=Q, noise=noise), "Assistant", "assistant", at=at)


def _turns(answer: str) -> list[T]:
    at = [T0 + timedelta(minutes=m) for m in range(8)]
    return [
        T("Starting the budget tracker project today", unit(20), speaker="User", at=at[0]),
        _answer(answer, 21, 1.2, at[1]),
        # the user's own statement: near the question in meaning, few of its words
        T("My first sprint wraps up on March 15", unit(22, near=Q, noise=0.5), at=at[2]),
        T(
            answer.replace("first", "next"),
            unit(23, near=Q, noise=1.3),
            "Assistant",
            "assistant",
            at=at[3],
        ),
        T("Ok, I'll use Flask for the backend", unit(24), speaker="User", at=at[4]),
        T(
            answer.replace("review", "demo"),
            unit(25, near=Q, noise=1.2),
            "Assistant",
            "assistant",
            at=at[5],
        ),
        T("Thanks, that helps", unit(26), speaker="User", at=at[6]),
        T(
            answer.replace("small", "lean"),
            unit(27, near=Q, noise=1.4),
            "Assistant",
            "assistant",
            at=at[7],
        ),
    ]


def _c(key: str, who: str, length: int) -> Candidate[str]:
    return Candidate(key, speaker=who, length=length)


def test_a_chat_reads_as_an_assistants_when_its_assistant_turns_run_twice_the_users():
    assistant = [_c(f"a{n}", "assistant:Assistant", 150) for n in range(3)]
    user = [_c(f"u{n}", "user:User", 22) for n in range(3)]
    assert assistant_chat(assistant + user)
    # two people writing alike, the second given the assistant role (LoCoMo's layout)
    people = [_c(f"b{n}", "assistant:Melanie", 12) for n in range(3)]
    assert not assistant_chat(people + user)
    # too few turns of one role to tell
    assert not assistant_chat(assistant + user[:2])
    # the turns read around a candidate count too
    around = Candidate(
        "u9",
        speaker="user:User",
        length=20,
        before=("x1", "x2", "x3"),
        before_speakers=("assistant:Assistant",) * 3,
        before_lengths=(140, 160, 150),
        after=("x4", "x5"),
        after_speakers=("user:User",) * 2,
        after_lengths=(25, 18),
    )
    assert assistant_chat([around])


async def test_in_an_assistants_chat_the_users_own_statement_outranks_word_rich_answers(
    make_settings, pool, user_id
):
    _, ids = await add_turns(pool, user_id, _turns(ANSWER))
    statement = ids[2]
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({QUERY: Q})))
    async with running(app) as client:
        r = await client.post(
            "/v1/messages/search", headers=await auth(pool, user_id), json={"query": QUERY}
        )
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == "fused"
    assert r.json()["results"][0]["id"] == statement
    # the people's rules (words weigh 0.6, no lift for the user) put an answer first
    people = await rank_turns(
        pool, FUSED.but(assistant=None), user_id=user_id, query=QUERY, vector=Q, limit=10
    )
    assert people[0].id != statement


async def test_two_people_chatting_keep_the_peoples_rules(pool, user_id):
    """The same turns where the second person writes as briefly as the first: the
    chat is not an assistant's, so ``FUSED`` ranks as its people's rules do."""
    short = "first sprint end review, first sprint end retro"
    _, ids = await add_turns(pool, user_id, _turns(short))
    fused = await rank_turns(pool, FUSED, user_id=user_id, query=QUERY, vector=Q, limit=10)
    people = await rank_turns(
        pool, FUSED.but(assistant=None), user_id=user_id, query=QUERY, vector=Q, limit=10
    )
    assert [(h.id, h.score) for h in fused] == [(h.id, h.score) for h in people]
    assert len(fused) == len(ids)


SAID = "How did you recommend I end my first sprint?"


async def test_a_question_about_what_the_assistant_said_is_not_lifted_to_the_users_turns(
    make_settings, pool, user_id
):
    """A question "how did you recommend ...": the answer asked about is the assistant's, so the
    user's turns get no lift over it (``assistant_asked_lift``): the answer that holds
    the question's words comes before the user's statement nearest in meaning, which
    the same meaning asked as the user's own question still puts first."""
    _, ids = await add_turns(pool, user_id, _turns(ANSWER))
    recommendation, statement = ids[1], ids[2]
    app = create_app(
        make_settings(QuerySettings),
        resolver=resolver_for(FixedEmbedder({SAID: Q, QUERY: Q})),
    )
    async with running(app) as client:
        headers = await auth(pool, user_id)
        said = await client.post("/v1/messages/search", headers=headers, json={"query": SAID})
        mine = await client.post("/v1/messages/search", headers=headers, json={"query": QUERY})
    assert said.status_code == 200, said.text
    assert said.json()["results"][0]["id"] == recommendation
    # the user's own question, the same meaning: the user's statement first, as before
    assert mine.json()["results"][0]["id"] == statement
    # without the rule the user's lift puts the statement first for both
    lifted = FUSED.but(assistant=FUSED.assistant.but(assistant_asked_lift=None))
    old = await rank_turns(pool, lifted, user_id=user_id, query=SAID, vector=Q, limit=10)
    assert old[0].id == statement


def test_what_reads_as_asking_what_the_assistant_said():
    for q in (
        "How did you recommend handling the rate limits?",
        "What did you suggest for the login page?",
        "Which library have you recommended for charts?",
        "You mentioned a caching approach, what was it?",
        "What was your advice on indexing?",
    ):
        assert asks_assistant(q), q
    for q in (
        "What steps would you suggest I take?",  # a request now, about the user's case
        "Can you walk me through the order in which I brought up features?",
        "When does my first sprint end?",
        "What did Caroline research?",
        "Could you show me how to implement a login feature?",
    ):
        assert not asks_assistant(q), q
