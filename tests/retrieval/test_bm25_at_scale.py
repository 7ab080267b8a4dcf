"""BM25 for a big user on real PostgreSQL: the per-user statistics of migration 0090
and the postings of migration 0180 follow every write, and the statement that reads
only the postings of the query's words ranks the turns as the full scan does."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from services.query.app import create_app
from services.query.ranking.turns import EXACT, exact_statement
from services.query.settings import QuerySettings
from shared.embeddings import vector_index
from tests.query.helpers import FixedEmbedder, auth, resolver_for, unit
from tests.retrieval.helpers import T, add_turns, postings
from tests.support import running

STATS = """
SELECT speaker, turns, lexemes FROM message_text_stats WHERE user_id = $1 AND turns > 0
"""
SHAPES = "SELECT message_id, lexemes, asks FROM message_shapes WHERE user_id = $1"
SHAPES_FROM_SCRATCH = """
SELECT id, length(fts), content ~ '\\?\\s*$' FROM messages WHERE user_id = $1
"""
COUNTED = """
SELECT coalesce(display_name, '') AS speaker, count(*) AS turns, sum(length(fts)) AS lexemes
FROM messages WHERE user_id = $1 GROUP BY 1
"""

AT = datetime(2024, 6, 1, tzinfo=UTC)
TURNS = [
    T("the weather was nice today", speaker="Ann"),
    T("the weather turned, pottery class was cancelled", speaker="Bob", role="assistant"),
    T("weather again and again, the weather", speaker="Bob", role="assistant"),
    T("more weather talk", speaker="Ann"),
    T("I signed up for a pottery class with Bob", speaker="Ann"),
    T("Ann, your pottery looks great", speaker="Bob", role="assistant"),
    T("hiking on sunday", speaker=""),
    T("Bob Marley plays while I do pottery", speaker="Ann Lee"),
    T("nothing to see here", speaker="Ann"),
]


async def _stats(pool: asyncpg.Pool, user_id: str, sql: str) -> dict[str, tuple[int, int]]:
    return {r["speaker"]: (r["turns"], r["lexemes"]) for r in await pool.fetch(sql, user_id)}


async def test_the_statistics_follow_inserts_copies_deletes_and_erasure(
    pool: asyncpg.Pool, user_id: str
) -> None:
    episode, ids = await add_turns(pool, user_id, TURNS)
    assert await _stats(pool, user_id, STATS) == await _stats(pool, user_id, COUNTED)
    # a small user keeps no postings (migration 0198); listed, the stored turns' are filled
    assert await postings(pool, user_id) == set()
    await vector_index.index_user(pool, user_id, "message", settle_s=0)
    assert await postings(pool, user_id) == await postings(pool, user_id, from_scratch=True)
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "messages",
            records=[
                (uuid.uuid4(), user_id, episode, "test", "chat-1", "user", name, text, AT)
                for name, text in (
                    ("Ann", "Ann copied pottery words"),
                    (None, "no speaker here? \n"),
                )
            ],
            columns=[
                "event_id",
                "user_id",
                "episode_id",
                "provider",
                "chat_id",
                "role",
                "display_name",
                "content",
                "occurred_at",
            ],
        )
    counted = await _stats(pool, user_id, COUNTED)
    assert await _stats(pool, user_id, STATS) == counted
    assert counted["Ann"][0] == 5 and counted[""][0] == 2
    kept = await postings(pool, user_id)
    assert kept == await postings(pool, user_id, from_scratch=True)
    # a word of the speaker's name only, of the turn's own words only, of both
    assert {(w, n, t) for w, _, _, _, _, n, t in kept if w in ("ann", "bob", "lee")} == {
        ("ann", True, False),
        ("ann", False, True),  # Bob's "Ann, your pottery ..."
        ("ann", True, True),  # Ann's copied "Ann copied ..."
        ("bob", True, False),
        ("bob", False, True),  # Ann's "... with Bob", Ann Lee's "Bob Marley ..."
        ("lee", True, False),
    }
    await pool.execute("DELETE FROM messages WHERE id = ANY($1::bigint[])", ids[:3])
    counted = await _stats(pool, user_id, COUNTED)
    assert await _stats(pool, user_id, STATS) == counted and counted["Bob"][0] == 1
    kept = await postings(pool, user_id)
    assert kept == await postings(pool, user_id, from_scratch=True)
    assert not {i for _, i, *_ in kept} & set(ids[:3])
    # each turn's length and whether it asks (migration 0181)
    shapes = {tuple(r) for r in await pool.fetch(SHAPES, user_id)}
    assert shapes == {tuple(r) for r in await pool.fetch(SHAPES_FROM_SCRATCH, user_id)}
    assert len(shapes) == len(TURNS) - 3 + 2 and sum(a for _, _, a in shapes) == 1
    await pool.execute("DELETE FROM users WHERE id = $1", user_id)  # erasure cascades
    assert await pool.fetch("SELECT 1 FROM message_text_stats WHERE user_id = $1", user_id) == []
    assert await postings(pool, user_id) == set()
    assert await pool.fetch(SHAPES, user_id) == []


async def _lexical(
    pool: asyncpg.Pool, name: str, user_id: str, query: str, *, per_word: int | None = None
) -> dict[int, float]:
    # the statement's arguments as turns._candidates gives them: no vector, no
    # filters, 100 candidates, no neighbours, no periods
    args: list[Any] = [user_id, query, None, None, None, None, None, 100, 0, [], [], False]
    statement = EXACT[name] if per_word is None else exact_statement(name, per_word)
    rows = await pool.fetch(statement, *args)
    return {r["id"]: r["rank"] for r in rows if r["rank"] is not None}


async def test_reading_only_the_matching_turns_gives_the_full_scans_ranks(
    pool: asyncpg.Pool, user_id: str
) -> None:
    _, ids = await add_turns(pool, user_id, TURNS)
    await vector_index.index_user(pool, user_id, "message", settle_s=0)  # postings kept
    # another user's turns change neither statement's statistics
    await add_turns(pool, f"user-{uuid.uuid4().hex[:12]}", [T("pottery pottery")] * 20)
    content = dict(zip(ids, (t.content.lower() for t in TURNS), strict=True))
    for query in (
        "weather pottery",
        "what did Ann say about pottery",  # names a speaker: the name is a word of hers
        "Bob pottery",  # a speaker's name that is also in other turns' words
        "Lee hiking",
        "zebra",  # no turn holds it
    ):
        full = await _lexical(pool, "bm25", user_id, query)
        read = await _lexical(pool, "bm25_stats", user_id, query)
        # every turn found holds a query word in its content; its rank is the same
        assert set(read) <= set(full), query
        for i, rank in read.items():
            assert abs(rank - full[i]) < 1e-9, (query, content[i], rank, full[i])
        # what only the full scan finds is a turn found through its speaker's name alone
        words = {w.strip("?,").lower() for w in query.split()}
        for i in set(full) - set(read):
            assert not words & set(content[i].replace(",", " ").split()), (query, content[i])
    assert await _lexical(pool, "bm25_stats", user_id, "zebra") == {}


async def test_a_word_in_more_documents_than_are_read_scores_its_newest_at_full_ranks(
    pool: asyncpg.Pool, user_id: str
) -> None:
    # "weather" is in five turns, the newest a long one where it weighs least;
    # reading at most two postings of each word scores its two newest turns, at the
    # full scan's ranks: the word's document frequency is still counted over all five
    _, ids = await add_turns(pool, user_id, TURNS)
    _, (latest,) = await add_turns(
        pool, user_id, [T("weather all week: rain, wind, fog, sleet, hail, snow and thunder")]
    )
    await vector_index.index_user(pool, user_id, "message", settle_s=0)
    full = await _lexical(pool, "bm25", user_id, "weather")
    assert len(full) == 5 and min(full, key=lambda i: full[i]) == latest
    for name in ("bm25_stats", "bm25_stats_passages"):
        assert await _lexical(pool, name, user_id, "weather", per_word=5) == pytest.approx(full)
        read = await _lexical(pool, name, user_id, "weather", per_word=2)
        assert set(read) == {ids[3], latest}, name
        assert read == pytest.approx({i: full[i] for i in read}, abs=1e-9)
    # two words, each in four or five turns: each word's two newest are scored, a turn for the
    # words it was read for (never more than the full scan gives it)
    both = await _lexical(pool, "bm25", user_id, "weather pottery")
    read = await _lexical(pool, "bm25_stats", user_id, "weather pottery", per_word=2)
    assert 2 < len(read) <= 4 and set(read) <= set(both)
    assert all(read[i] <= both[i] + 1e-9 for i in read)


async def test_a_big_users_bm25_search_answers_as_before_it_was_listed(
    make_settings: Any, pool: asyncpg.Pool, user_id: str
) -> None:
    await add_turns(
        pool, user_id, [T(t.content, unit(i + 1), t.speaker) for i, t in enumerate(TURNS)]
    )
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({})))
    async with running(app) as client:
        h = await auth(pool, user_id)

        async def search() -> list[tuple[int, float]]:
            r = await client.post(
                "/v1/messages/search",
                headers=h,
                json={"query": "weather pottery class", "mode": "bm25", "limit": 20},
            )
            assert r.status_code == 200, r.text
            return [(x["id"], x["score"]) for x in r.json()["results"]]

        small = await search()
        await vector_index.index_user(pool, user_id, "message", settle_s=0)
        assert await vector_index.is_ready(pool, user_id, "message")  # the big user's path
        big = await search()
    assert len(small) == 7 and big == small


async def test_a_turn_written_while_the_user_is_listed_gets_its_postings(
    pool: asyncpg.Pool, user_id: str
) -> None:
    """A turn whose transaction began before the list and commits during it: its
    trigger did not see the list, the first fill did not see the turn; the fill after
    the settling time writes its postings, and only then is the user ready."""
    import asyncio

    episode, _ = await add_turns(pool, user_id, TURNS[:3])
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            "INSERT INTO messages (event_id, user_id, episode_id, provider, chat_id, role, "
            "display_name, content, occurred_at) "
            "VALUES ($1, $2, $3, 'test', 'chat-1', 'user', 'Ann', 'late pottery words', $4)",
            uuid.uuid4(),
            user_id,
            episode,
            AT,
        )
        listing = asyncio.create_task(
            vector_index.index_user(pool, user_id, "message", settle_s=0.5)
        )
        await asyncio.sleep(0.2)
        assert not await pool.fetchval(
            "SELECT ready FROM message_postings_users WHERE user_id = $1", user_id
        )
        await tx.commit()
    await listing
    assert await pool.fetchval(
        "SELECT ready FROM message_postings_users WHERE user_id = $1", user_id
    )
    kept = await postings(pool, user_id)
    assert kept == await postings(pool, user_id, from_scratch=True)
    assert "late" in {w for w, *_ in kept}


async def test_a_turn_deleted_while_the_user_is_listed_leaves_no_postings(
    pool: asyncpg.Pool, user_id: str
) -> None:
    """A turn deleted in a transaction that commits during the list: its trigger ran
    before the fill wrote the turn's postings (there were none to remove) and the fill
    still saw the turn; the sweep after the settling time removes what the fill left,
    so the erased turn's words are not kept, and then the user is ready."""
    import asyncio

    episode, ids = await add_turns(pool, user_id, TURNS[:3])
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("DELETE FROM messages WHERE id = $1", ids[1])  # "pottery class"
        listing = asyncio.create_task(
            vector_index.index_user(pool, user_id, "message", settle_s=0.5)
        )
        await asyncio.sleep(0.2)
        await tx.commit()
    await listing
    assert await pool.fetchval(
        "SELECT ready FROM message_postings_users WHERE user_id = $1", user_id
    )
    kept = await postings(pool, user_id)
    assert kept == await postings(pool, user_id, from_scratch=True)
    assert not {w for w, *_ in kept} & {"potteri", "class", "cancel"}


COUNTS = "SELECT lexeme, turns FROM message_word_counts WHERE user_id = $1"
FULL_COUNTS = """
SELECT lexeme, count(*) AS turns FROM message_postings
WHERE user_id = $1 AND part = -1 AND NOT by_name GROUP BY lexeme HAVING count(*) >= $2
"""


async def test_a_common_words_kept_count_and_its_postings_since_are_its_count(
    pool: asyncpg.Pool, user_id: str
) -> None:
    # read two postings of each word: "weather" (in five turns) and "pottery" (four)
    # are past it, so their document frequency is the kept count (migration 0200)
    # plus the postings written since; the ranks are those of counting every posting
    _, ids = await add_turns(pool, user_id, TURNS)
    await vector_index.index_user(pool, user_id, "message", settle_s=0)
    query = "weather pottery class"

    async def ranks() -> dict[int, float]:
        return await _lexical(pool, "bm25_stats", user_id, query, per_word=2)

    counted_nothing = await ranks()  # no word is in the default 1,000 turns: none kept
    assert await pool.fetch(COUNTS, user_id) == []
    assert await vector_index.count_words(pool, user_id, settle_s=0, counted_from=2) > 0
    kept = {r["lexeme"]: r["turns"] for r in await pool.fetch(COUNTS, user_id)}
    full = {r["lexeme"]: r["turns"] for r in await pool.fetch(FULL_COUNTS, user_id, 2)}
    assert kept == full and kept["weather"] == 4 and kept["potteri"] == 4  # stemmed
    assert await ranks() == pytest.approx(counted_nothing, abs=1e-9)

    # the count is read: a wrong one moves the ranks
    await pool.execute(
        "UPDATE message_word_counts SET turns = turns + 50 WHERE user_id = $1", user_id
    )
    assert await ranks() != pytest.approx(counted_nothing, abs=1e-9)
    await vector_index.count_words(pool, user_id, settle_s=0, counted_from=2)

    async def counted_every_posting() -> dict[int, float]:
        async with pool.acquire() as conn, conn.transaction():
            kept_rows = await conn.fetch(
                "DELETE FROM message_word_counts WHERE user_id = $1 RETURNING *", user_id
            )
            got = await _lexical(conn, "bm25_stats", user_id, query, per_word=2)
            await conn.executemany(
                "INSERT INTO message_word_counts (user_id, lexeme, turns, upto) "
                "VALUES ($1, $2, $3, $4)",
                [(r["user_id"], r["lexeme"], r["turns"], r["upto"]) for r in kept_rows],
            )
        return got

    # turns written after the count: their postings are added to it
    _, new = await add_turns(
        pool, user_id, [T("weather and pottery class again"), T("the weather, once more")]
    )
    assert {r["turns"] for r in await pool.fetch(COUNTS, user_id)} <= set(full.values())
    assert await ranks() == pytest.approx(await counted_every_posting(), abs=1e-9)
    # turns deleted, counted ones and a new one: they take themselves off the count
    await pool.execute(
        "DELETE FROM messages WHERE id = ANY($1::bigint[])", [ids[0], ids[2], ids[4], new[1]]
    )
    kept = {r["lexeme"]: r["turns"] for r in await pool.fetch(COUNTS, user_id)}
    assert kept["weather"] == 4 - 2 and kept["potteri"] == 4 - 1
    assert await ranks() == pytest.approx(await counted_every_posting(), abs=1e-9)
    await pool.execute("DELETE FROM users WHERE id = $1", user_id)  # erasure cascades
    assert await pool.fetch(COUNTS, user_id) == []


async def test_a_ready_users_words_are_counted_again_once_their_turns_grew(
    pool: asyncpg.Pool, user_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vector_index, "WORDS_COUNTED_FROM", 3)
    first = [*TURNS, T("hiking again on monday"), T("nothing new")]
    # embedded turns: the indexer lists a user by their embedded rows
    await add_turns(
        pool, user_id, [T(t.content, unit(i + 1), t.speaker) for i, t in enumerate(first)]
    )
    indexer = vector_index.Indexer(min_rows=5, recheck_s=0.0, settle_s=0.0)
    indexer.note(user_id, "message")
    assert await indexer.run(pool) == 1  # listed, filled, ready, counted
    counted = "SELECT counted_turns FROM message_postings_users WHERE user_id = $1"
    assert await pool.fetchval(counted, user_id) == 11
    assert {r["lexeme"] for r in await pool.fetch(COUNTS, user_id)} == {"weather", "potteri"}
    # a twelfth turn: not a tenth's growth, not counted again
    await add_turns(pool, user_id, [T("weather, pottery and a class")])
    indexer.note(user_id, "message")
    await indexer.run(pool)
    assert await pool.fetchval(counted, user_id) == 11
    # two more: past a tenth, counted again ("class" is now in five turns)
    await add_turns(pool, user_id, [T("class of pottery"), T("a class on weather")])
    indexer.note(user_id, "message")
    await indexer.run(pool)
    assert await pool.fetchval(counted, user_id) == 14
    kept = {r["lexeme"]: r["turns"] for r in await pool.fetch(COUNTS, user_id)}
    assert kept == {r["lexeme"]: r["turns"] for r in await pool.fetch(FULL_COUNTS, user_id, 3)}
    assert set(kept) == {"weather", "potteri", "class"}
