"""POST /v1/messages/search on real PostgreSQL + pgvector: modes, fusion, filters, scope."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from services.query.app import create_app
from services.query.ranking import turns as message_search
from services.query.settings import QuerySettings
from shared.embeddings import vector_index
from tests.query.helpers import FailingEmbedder, FixedEmbedder, auth, resolver_for, unit
from tests.retrieval.helpers import T, add_turns
from tests.support import running

Q = unit(1)


def _app(make_settings, embedder=None):
    embedder = embedder or FixedEmbedder({"hiking trip": Q, "anything": Q})
    return create_app(make_settings(QuerySettings), resolver=resolver_for(embedder))


async def _search(client, h, query, **kw):
    r = await client.post("/v1/messages/search", headers=h, json={"query": query, **kw})
    assert r.status_code == 200, r.text
    return r.json()


async def test_full_text_finds_stemmed_words_and_reports_the_turn(make_settings, pool, user_id):
    episode, ids = await add_turns(
        pool,
        user_id,
        [
            T("We went hiking in the Alps last summer", speaker="Ann"),
            T("I bought new running shoes", speaker="Bob", role="assistant"),
        ],
    )
    async with running(_app(make_settings)) as client:
        body = await _search(client, await auth(pool, user_id), "hikes", mode="fts")
    assert body["mode"] == "fts"
    [hit] = body["results"]
    assert hit["id"] == ids[0]
    assert hit["episode_id"] == str(episode)
    assert hit["display_name"] == "Ann" and hit["role"] == "user"
    assert hit["external_message_id"].startswith("m-")
    assert hit["content_snippet"] == "We went hiking in the Alps last summer"
    assert hit["signals"]["fts"] and not hit["signals"]["semantic"]


async def test_semantic_ranks_by_cosine_and_ignores_turns_not_yet_embedded(
    make_settings, pool, user_id
):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("far", unit(5)),
            T("nearest", Q),
            T("near", unit(6, near=Q, noise=0.5)),
            T("pending, would be nearest", None),
        ],
    )
    async with running(_app(make_settings)) as client:
        body = await _search(client, await auth(pool, user_id), "hiking trip", mode="semantic")
    assert body["mode"] == "semantic"
    assert [r["id"] for r in body["results"]] == [ids[1], ids[2], ids[0]]
    assert body["results"][0]["signals"]["semantic_rank"] == 1


async def test_hybrid_is_seventy_semantic_thirty_lexical_min_max(make_settings, pool, user_id):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("hiking trip hiking trip", unit(2, near=Q, noise=0.8)),  # best lexical, mid semantic
            T("nothing in common", Q),  # best semantic only
            T("a trip", unit(3)),  # weak lexical, worst semantic
        ],
    )
    async with running(_app(make_settings)) as client:
        body = await _search(client, await auth(pool, user_id), "hiking trip", mode="hybrid")
    assert body["mode"] == "hybrid"
    scores = {r["id"]: r["score"] for r in body["results"]}
    assert scores[ids[1]] == pytest.approx(0.7)  # semantic 1, lexical 0
    assert scores[ids[2]] == pytest.approx(0.0, abs=1e-6)  # worst of both
    assert 0.3 < scores[ids[0]] < 1.0  # lexical 1 + part of the semantic


async def test_rrf_puts_a_turn_both_signals_agree_on_first(make_settings, pool, user_id):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("nothing in common", unit(7, near=Q, noise=0.3)),  # 2nd semantic, no lexical
            T("hiking trip plans", Q),  # 1st semantic and 1st lexical
            T("a trip", unit(8)),  # 2nd lexical, last semantic
        ],
    )
    async with running(_app(make_settings)) as client:
        body = await _search(client, await auth(pool, user_id), "hiking trip", mode="rrf")
    assert body["mode"] == "rrf"
    order = [r["id"] for r in body["results"]]
    assert order[0] == ids[1]
    assert body["results"][0]["score"] == pytest.approx(1.0)  # first in both lists
    assert set(order) == set(ids)


async def test_without_a_query_vector_every_mode_runs_full_text(make_settings, pool, user_id):
    await add_turns(pool, user_id, [T("hiking trip", Q), T("unrelated", unit(4))])
    app = _app(make_settings, FailingEmbedder())
    async with running(app) as client:
        h = await auth(pool, user_id)
        for mode in ("rrf", "hybrid", "semantic"):
            body = await _search(client, h, "hiking", mode=mode)
            assert body["mode"] == "fts"
            assert [r["content_snippet"] for r in body["results"]] == ["hiking trip"]


async def test_chat_episode_and_time_filters(make_settings, pool, user_id):
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    ep1, a = await add_turns(pool, user_id, [T("hiking trip one", Q, chat_id="c1", at=t0)])
    ep2, b = await add_turns(
        pool, user_id, [T("hiking trip two", Q, chat_id="c2", at=t0 + timedelta(days=10))]
    )
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)

        async def ids(**kw):
            return {r["id"] for r in (await _search(client, h, "hiking trip", **kw))["results"]}

        assert await ids() == {a[0], b[0]}
        assert await ids(chat_id="c2") == {b[0]}
        assert await ids(episode_id=str(ep1)) == {a[0]}
        assert await ids(since=(t0 + timedelta(days=1)).isoformat()) == {b[0]}
        assert await ids(until=(t0 + timedelta(days=1)).isoformat()) == {a[0]}


async def test_a_user_never_sees_another_users_turns(make_settings, pool, user_id):
    other = f"user-{uuid.uuid4().hex[:12]}"
    await add_turns(pool, other, [T("hiking trip secret of the other user", Q)])
    _, mine = await add_turns(pool, user_id, [T("my hiking trip", unit(9, near=Q, noise=0.5))])
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        for mode in message_search.MODES:
            body = await _search(client, h, "hiking trip", mode=mode)
            assert [r["id"] for r in body["results"]] == mine, mode
        r = await client.post(
            "/v1/messages/search",
            json={"query": "hiking trip"},
            headers={**h, "X-Engram-User": other},
        )
        assert r.status_code == 403
        r = await client.post("/v1/messages/search", json={"query": "hiking trip"})
        assert r.status_code == 401


async def test_a_big_user_walks_the_index_and_still_gets_k_results(make_settings, pool, user_id):
    # The HNSW path (both users listed for the index, as the embedder does past the
    # exact-scan limit) with another user's 3,000 turns closer to the query than any
    # of ours: the filtered-HNSW trap.
    crowd = f"user-{uuid.uuid4().hex[:12]}"
    await add_turns(
        pool, crowd, [T(f"crowd {i}", unit(1000 + i, near=Q, noise=0.2)) for i in range(3000)]
    )
    _, mine = await add_turns(
        pool, user_id, [T(f"mine {i}", unit(5000 + i, near=Q, noise=0.9)) for i in range(40)]
    )
    for who in (crowd, user_id):
        await vector_index.index_user(pool, who, "message", settle_s=0)
    assert await vector_index.is_ready(pool, user_id, "message")  # so: the index path
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        body = await _search(client, h, "anything", mode="semantic", limit=30)
        assert len(body["results"]) == 30
        assert {r["id"] for r in body["results"]} <= set(mine)
        exact = await pool.fetch(
            "SELECT id FROM messages WHERE user_id = $1 ORDER BY embedding <=> $2 LIMIT 10",
            user_id,
            __import__("numpy").asarray(Q, dtype="float32"),
        )
    got = [r["id"] for r in body["results"][:10]]
    assert len(set(got) & {r["id"] for r in exact}) >= 8  # approximate, but close


async def test_bad_requests_are_refused(make_settings, pool, user_id):
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        for body in (
            {"query": "x", "limit": 51},
            {"query": "x", "mode": "magic"},
            {"query": "x", "episode_id": "not-a-uuid"},
        ):
            r = await client.post("/v1/messages/search", headers=h, json=body)
            assert r.status_code == 422, body


async def test_an_empty_query_lists_the_newest_turns_and_facts_as_every_search_does(
    make_settings, pool, user_id
):
    """Issue 29.18: '' and '*' mean newest first on /v1/messages/search and
    /v1/facts/search too, as on the memory, episode and Jarvus searches."""
    _, ids = await add_turns(pool, user_id, [T("first words"), T("second words"), T("third words")])
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        for query in ("", "*", "  "):
            r = await client.post(
                "/v1/messages/search", headers=h, json={"query": query, "limit": 2}
            )
            assert r.status_code == 200, r.text
            assert r.json()["mode"] == "newest"
            assert [x["id"] for x in r.json()["results"]] == [ids[2], ids[1]]
        for key, value in (("a", "older"), ("b", "newer")):
            r = await client.post(
                "/v1/facts", headers=h, json={"category": "c", "key": key, "value": value}
            )
            assert r.status_code == 200, r.text
        r = await client.post("/v1/facts/search", headers=h, json={"query": ""})
        assert r.status_code == 200, r.text
        facts = r.json()["facts"]
        assert [f["value"] for f in facts] == ["newer", "older"]
        assert {f["match"] for f in facts} == {"newest"}


async def test_bm25_prefers_the_rarer_word_and_the_speaker_named(make_settings, pool, user_id):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("the weather was nice today", speaker="Ann"),
            T("the weather turned, pottery class was cancelled", speaker="Bob", role="assistant"),
            T("weather again", speaker="Bob", role="assistant"),
            T("more weather talk", speaker="Ann"),
            T("I signed up for a pottery class", speaker="Ann"),
        ],
    )
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        rare = await _search(client, h, "weather pottery", mode="bm25")
        named = await _search(client, h, "what did Ann say about pottery", mode="bm25")
    assert rare["mode"] == "bm25"
    # "pottery" is in 2 of 5 turns, "weather" in 4: the turn with both comes first,
    # then the other pottery turn, then the weather-only ones
    assert [r["id"] for r in rare["results"][:2]] == [ids[1], ids[4]]
    # the speaker's name counts as one of the turn's words
    assert named["results"][0]["id"] == ids[4]


async def test_bm25_statistics_are_the_users_own(make_settings, pool, user_id):
    turns = [T("pottery class on monday"), T("hiking on sunday"), T("pottery again")]
    await add_turns(pool, user_id, turns)
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        before = await _search(client, h, "pottery hiking", mode="bm25")
        # another user's turns full of "pottery" must not change this user's idf
        await add_turns(
            pool, f"user-{uuid.uuid4().hex[:12]}", [T("pottery pottery") for _ in range(30)]
        )
        after = await _search(client, h, "pottery hiking", mode="bm25")
    assert [(r["id"], r["score"]) for r in before["results"]] == [
        (r["id"], r["score"]) for r in after["results"]
    ]


async def test_the_default_fuses_bm25_and_semantic_and_falls_back_to_bm25(
    make_settings, pool, user_id
):
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("hiking trip with friends", unit(11, near=Q, noise=0.4)),
            T("nothing in common", Q),
            T("a trip", unit(12)),
        ],
    )
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        body = await _search(client, h, "hiking trip")
    assert body["mode"] == "fused"
    assert body["results"][0]["id"] == ids[0]  # best lexical, second semantic
    assert {r["id"] for r in body["results"]} == set(ids)
    async with running(_app(make_settings, FailingEmbedder())) as client:
        body = await _search(client, h, "hiking trip")
    assert body["mode"] == "bm25"
    assert [r["id"] for r in body["results"]][:2] == [ids[0], ids[2]]


async def test_the_default_brings_up_the_answer_next_to_the_matching_turn(
    make_settings, pool, user_id
):
    # the first turn names the words; the reply after it names none of them (and
    # has no vector yet, so no signal can find it)
    episode, ids = await add_turns(
        pool,
        user_id,
        [
            T("tell me about the hiking trip with your sister", Q, speaker="Ann"),
            T("wonderful, we reached the glacier on day two", speaker="Bob", role="assistant"),
            T("unrelated small talk", speaker="Ann"),
            T("more unrelated small talk", speaker="Bob", role="assistant"),
            T("still nothing", speaker="Ann"),
            T("the end of it", speaker="Bob", role="assistant"),
        ],
    )
    _, elsewhere = await add_turns(pool, user_id, [T("a trip")])
    # at the same times as the turns above, but an episode of its own
    _, apart = await add_turns(pool, user_id, [T("the glacier"), T("again the glacier")])
    async with running(_app(make_settings)) as client:
        body = await _search(client, await auth(pool, user_id), "hiking trip")
    assert body["mode"] == "fused"
    got = {r["id"]: r for r in body["results"]}
    order = [r["id"] for r in body["results"]]
    assert order[0] == ids[0]
    # found as a neighbour only: no signal, yet above a weak match of its own
    answer = got[ids[1]]
    assert not answer["signals"]["fts"] and not answer["signals"]["semantic"]
    assert order.index(ids[1]) < order.index(elsewhere[0])
    # neighbours reach 3 turns either way, within the episode only
    assert ids[3] in got and ids[4] not in got and not set(apart) & set(got)
    assert answer["score"] > got[ids[2]]["score"] > got[ids[3]]["score"] > 0
    assert all(0.0 <= r["score"] <= 1.0 for r in body["results"])
    assert body["results"][0]["episode_id"] == str(episode)


async def test_neighbours_respect_the_filters_and_the_user(make_settings, pool, user_id):
    t0 = datetime(2024, 1, 1, 12, tzinfo=UTC)
    episode, ids = await add_turns(
        pool,
        user_id,
        [
            T("what about the pottery class?", Q, at=t0),
            # no vector: a neighbour; the other speaker's (a message of the asker's
            # own a minute later would be the same burst, not the answer)
            T("it starts next week", speaker="Bob", role="assistant", at=t0 + timedelta(minutes=1)),
        ],
    )
    other = f"user-{uuid.uuid4().hex[:12]}"
    await add_turns(
        pool,
        other,
        [T("pottery class secret", Q, at=t0), T("the other user's answer", unit(31), at=t0)],
    )
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)

        async def found(**kw):
            return [r["id"] for r in (await _search(client, h, "pottery class", **kw))["results"]]

        assert await found() == ids[::-1]  # the reply to the question first
        assert await found(until=(t0 + timedelta(seconds=30)).isoformat()) == ids[:1]
        assert await found(chat_id="elsewhere") == []


async def test_a_turn_in_the_period_the_query_names_comes_first(make_settings, pool, user_id):
    may, june = datetime(2024, 5, 10, tzinfo=UTC), datetime(2024, 6, 10, tzinfo=UTC)
    _, in_june = await add_turns(pool, user_id, [T("the hiking trip was fun", Q, at=june)])
    _, in_may = await add_turns(pool, user_id, [T("the hiking trip was fun", Q, at=may)])
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        for query, first in (
            ("hiking trip in May 2024", in_may),
            ("hiking trip", in_june),
            ("hiking trip on 10 June 2024", in_june),
        ):
            body = await _search(client, h, query)
            assert body["results"][0]["id"] == first[0], query
        # the lift is the default's: other modes rank the two turns alike
        body = await _search(client, h, "hiking trip in May 2024", mode="bm25")
        assert body["results"][0]["score"] == body["results"][1]["score"]


async def test_the_answer_to_a_matching_question_comes_before_the_question(
    make_settings, pool, user_id
):
    # the question carries the query's words; the reply after it carries the news
    _, ids = await add_turns(
        pool,
        user_id,
        [
            T("did you finish the pottery class?", Q, speaker="Ann"),
            T(
                "yes! I made a bowl, two mugs and a vase",
                unit(21, near=Q, noise=0.5),
                speaker="Bob",
                role="assistant",
            ),
        ],
    )
    await add_turns(pool, user_id, [T("unrelated", unit(22))])
    async with running(_app(make_settings)) as client:
        body = await _search(client, await auth(pool, user_id), "pottery class")
    order = [r["id"] for r in body["results"]]
    assert order[:2] == [ids[1], ids[0]]
    assert all(0.0 <= r["score"] <= 1.0 for r in body["results"])


async def test_a_turn_with_few_words_ranks_below_a_fuller_one_it_ties_with(
    make_settings, pool, user_id
):
    t0 = datetime(2024, 1, 1, 12, tzinfo=UTC)
    # equally close to the query; the short one is later, so it would win a tie
    _, full = await add_turns(
        pool,
        user_id,
        [
            T(
                "my teacher showed us how to centre clay on the wheel, then trim and glaze a bowl",
                Q,
                at=t0,
            )
        ],
    )
    _, short = await add_turns(pool, user_id, [T("oh nice", Q, at=t0 + timedelta(hours=1))])
    await add_turns(pool, user_id, [T("unrelated", unit(23))])
    async with running(_app(make_settings)) as client:
        h = await auth(pool, user_id)
        body = await _search(client, h, "anything")  # no word in common: semantic alone
        assert [r["id"] for r in body["results"][:2]] == [full[0], short[0]]
        assert body["results"][0]["score"] > body["results"][1]["score"]
        # only the default reads length: semantic ranks the two alike
        body = await _search(client, h, "anything", mode="semantic")
        assert body["results"][0]["score"] == body["results"][1]["score"]
