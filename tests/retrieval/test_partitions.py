"""The partitioned tables (migration 0170): hash partitions by user, the user in every
key; two users in one partition share its indexes, and still never see each other's
rows; erasure empties every partition of the user."""

from __future__ import annotations

import uuid

import asyncpg

from services.query.app import create_app
from services.query.settings import QuerySettings
from shared.embeddings import vector_index
from tests.query.helpers import FixedEmbedder, admin_auth, auth, resolver_for, set_vector, unit
from tests.retrieval.helpers import T, add_turns
from tests.support import running

Q = unit(3)
PARTITIONED = {
    "messages": "PRIMARY KEY (user_id, id)",
    "memory_items": "PRIMARY KEY (user_id, id)",
    "episodes": "PRIMARY KEY (user_id, id)",
    "message_passages": "PRIMARY KEY (user_id, message_id, idx)",
}


async def _partition(pool: asyncpg.Pool, user_id: str) -> int:
    """The remainder of the hash partition ``user_id``'s rows go to (of 16)."""
    for r in range(16):
        if await pool.fetchval(
            "SELECT satisfies_hash_partition('messages'::regclass, 16, $1, $2::text)", r, user_id
        ):
            return r
    raise AssertionError(f"{user_id} is in no partition")


async def _neighbour(pool: asyncpg.Pool, user_id: str) -> str:
    """A new user id whose rows land in ``user_id``'s partition."""
    mine = await _partition(pool, user_id)
    for _ in range(200):
        other = f"user-{uuid.uuid4().hex[:12]}"
        if await _partition(pool, other) == mine:
            return other
    raise AssertionError("no neighbour in 200 tries")


async def test_the_per_user_tables_are_16_hash_partitions_keyed_by_the_user(pool):
    for table, pk in PARTITIONED.items():
        strategy = await pool.fetchval(
            "SELECT partstrat::text FROM pg_partitioned_table WHERE partrelid = $1::regclass",
            table,
        )
        assert strategy == "h", table
        leaves = await pool.fetchval(
            "SELECT count(*) FROM pg_partition_tree($1::regclass) WHERE isleaf", table
        )
        assert leaves == 16, table
        got = await pool.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = $1::regclass AND contype = 'p'",
            table,
        )
        assert got == pk
    # a row lands in the partition of its user's hash, and only there
    user = f"user-{uuid.uuid4().hex[:12]}"
    await add_turns(pool, user, [T("hello there")])
    where = await pool.fetchval(
        "SELECT tableoid::regclass::text FROM messages WHERE user_id = $1", user
    )
    assert where == f"messages_p{await _partition(pool, user):02d}"


async def test_a_neighbour_in_the_same_partition_never_reaches_a_users_search(
    make_settings, pool, user_id
):
    # Both listed for the HNSW index, so both walk the one graph of their partition;
    # the neighbour's 3,000 turns are all closer to the query than any of ours.
    crowd = await _neighbour(pool, user_id)
    await add_turns(
        pool,
        crowd,
        [T(f"crowd hiking {i}", unit(1000 + i, near=Q, noise=0.2)) for i in range(3000)],
    )
    _, mine = await add_turns(
        pool, user_id, [T(f"mine hiking {i}", unit(5000 + i, near=Q, noise=0.9)) for i in range(40)]
    )
    for who in (crowd, user_id):
        await vector_index.index_user(pool, who, "message", settle_s=0)
    assert await vector_index.is_ready(pool, user_id, "message")  # so: the index path
    app = create_app(
        make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({"hiking": Q}))
    )
    async with running(app) as client:
        h = await auth(pool, user_id)
        for mode in ("semantic", "fused", "fts"):
            r = await client.post(
                "/v1/messages/search",
                headers=h,
                json={"query": "hiking", "mode": mode, "limit": 30},
            )
            assert r.status_code == 200, r.text
            got = {hit["id"] for hit in r.json()["results"]}
            assert len(got) == 30, mode  # k results, none of them the neighbour's
            assert got <= set(mine), mode


async def test_memory_search_and_erasure_within_one_partition(make_settings, pool, user_id):
    other = await _neighbour(pool, user_id)
    app = create_app(
        make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({"kayak": Q}))
    )
    async with running(app) as client:
        ids: dict[str, list[str]] = {}
        for who in (user_id, other):
            h = await auth(pool, who)
            ids[who] = []
            for i in range(3):
                r = await client.post(
                    "/v1/memory/add",
                    headers=h,
                    json={"type": "fact", "content": f"{who} paddles a kayak, trip {i}"},
                )
                assert r.status_code in (200, 201), r.text
                ids[who].append(r.json()["id"])
                await set_vector(pool, r.json()["id"], Q)
        await add_turns(pool, user_id, [T("my kayak is red", Q)])
        await add_turns(pool, other, [T("my kayak is blue", Q)])
        r = await client.post(
            "/v1/memory/search", headers=await auth(pool, user_id), json={"query": "kayak"}
        )
        assert r.status_code == 200, r.text
        found = {m["id"] for m in r.json()["results"]}
        assert found == set(ids[user_id])

        r = await client.delete(f"/v1/users/{user_id}", headers=await admin_auth(pool))
        assert r.status_code == 200, r.text
        assert "messages_p" not in str(r.json()["rows"])  # counted under their table
    for table in (*PARTITIONED, "observation_evidence", "fact_reviews", "people"):
        assert await pool.fetchval(f"SELECT count(*) FROM {table} WHERE user_id = $1", user_id) == 0
    leaves = await pool.fetch(
        "SELECT relid::regclass::text AS t FROM pg_partition_tree('messages'::regclass) "
        "WHERE isleaf"
    )
    for leaf in leaves:
        n = await pool.fetchval(f"SELECT count(*) FROM {leaf['t']} WHERE user_id = $1", user_id)
        assert n == 0, leaf["t"]
    # the neighbour in the same partition keeps everything
    assert await pool.fetchval("SELECT count(*) FROM memory_items WHERE user_id = $1", other) == 3
    assert await pool.fetchval("SELECT count(*) FROM messages WHERE user_id = $1", other) == 1
