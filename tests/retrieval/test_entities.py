"""An entity named once in a question reaches the turn that names it in another session.

Issue 27 item 3 asked for an entity index as a third candidate signal. It was
built (a migration's trigger writing each turn's runs of capitalised words, a
third candidate list in the turn search, scored alone or by meaning) and measured
on both tuning sets: it gained on neither check half, because the lexical side
already reads a rare name as the query's most telling word (docs/retrieval.md,
"Entities: tried and not kept"; ``bench/entities_tried.patch`` re-applies it).
What the signal was for holds on main through BM25 over the user's own turns, and
this test keeps it so: on real PostgreSQL, a question written in lower case.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from services.query.ranking.fusion import FUSED
from services.query.ranking.turns import rank_turns
from tests.query.helpers import unit
from tests.retrieval.helpers import T, add_turns


async def test_an_entity_named_once_in_a_question_reaches_a_turn_of_another_session(pool, user_id):
    """Session two is all about the draft (the question's other words and its
    meaning, 60 turns); the one turn naming Okonkwo is in session one, far from the
    question in meaning."""
    q = unit(1)
    t0 = datetime(2024, 3, 4, 9, tzinfo=UTC)
    _, first = await add_turns(
        pool,
        user_id,
        [
            T("Starting the thesis today", unit(30), at=t0),
            T("Dr. Okonkwo said chapter two needs a stronger argument", unit(31), at=t0),
        ],
    )
    talk = [
        T(
            f"the draft needs work, what do you think of the draft {n}",
            unit(40 + n, near=q, noise=0.6),
            at=t0 + timedelta(days=3, minutes=n),
        )
        for n in range(60)
    ]
    await add_turns(pool, user_id, talk, episode=uuid.uuid4())
    query = "what did okonkwo think of my draft"
    hits = await rank_turns(pool, FUSED, user_id=user_id, query=query, vector=q, limit=10)
    assert first[1] in [h.id for h in hits]
    # meaning alone does not reach it: the name is what finds it
    semantic = await rank_turns(
        pool, FUSED.but(name="t", w_lex=0.0), user_id=user_id, query=query, vector=q, limit=10
    )
    assert first[1] not in [h.id for h in semantic]
