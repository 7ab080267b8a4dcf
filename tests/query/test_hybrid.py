"""Hybrid ranking, fallbacks and modes on real PostgreSQL + pgvector."""

import re
import uuid

from services.query.app import create_app
from services.query.ranking.sql import walk_settings
from services.query.settings import QuerySettings
from tests.query.helpers import (
    FailingEmbedder,
    FixedEmbedder,
    auth,
    resolver_for,
    set_vector,
    unit,
)
from tests.support import running


async def _indexes_in(conn, plan: list) -> set[str]:
    """The indexes a plan scans, each named by its partitioned parent's name when it is
    a partition's (migration 0170: memory_items_p05_embedding_idx is a part of
    memory_items_embedding_hnsw_idx), with its access method: {'name (am)'}."""
    names = {
        m.group(1)
        for r in plan
        for m in [re.search(r"Index (?:Only )?Scan (?:Backward )?(?:using|on) (\S+)", r[0])]
        if m
    }
    rows = await conn.fetch(
        "SELECT coalesce(pg_partition_root(c.oid), c.oid)::regclass::text AS root, a.amname "
        "FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.oid = ANY($1::regclass[])",
        list(names),
    )
    return {f"{r['root']} ({r['amname']})" for r in rows}


async def _add(client, h, content, type_="fact"):
    r = await client.post("/v1/memory/add", headers=h, json={"type": type_, "content": content})
    assert r.status_code == 200, r.text
    return r.json()["id"]


async def _search(client, h, query, **kw):
    r = await client.post("/v1/memory/search", headers=h, json={"query": query, **kw})
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_paraphrase_outranks_a_weak_lexical_match_with_the_local_model(
    make_settings, pool, user_id
):
    from shared.embeddings.local import LocalEmbedder

    model = LocalEmbedder()
    # no resolver: the service's default, shared.embeddings (local model by default)
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    texts = {
        "paraphrase": "Drives a crimson automobile",
        "lexical": "The car park near the office closes at nine in the evening",
        "other": "Enjoys baking sourdough bread on weekends",
    }
    async with running(app) as client:
        ids = {name: await _add(client, h, text) for name, text in texts.items()}
        for name, vector in zip(texts, await model.embed(list(texts.values())), strict=True):
            await set_vector(pool, ids[name], vector)
        body = await _search(client, h, "red car")
    assert body["mode"] == "hybrid"
    order = [r["id"] for r in body["results"]]
    assert order.index(ids["paraphrase"]) < order.index(ids["lexical"])
    top = body["results"][0]
    assert top["id"] == ids["paraphrase"]
    assert top["signals"] == {"fts": False, "semantic": True}
    weak = next(r for r in body["results"] if r["id"] == ids["lexical"])
    assert weak["signals"] == {"fts": True, "semantic": True}
    # min-max per signal over the candidates: best semantic = 1, the only lexical hit = 1
    assert top["score"] == 0.7 and weak["score"] >= 0.3


async def test_the_score_is_seventy_semantic_thirty_lexical(make_settings, pool, user_id):
    q = unit(1)
    embedder = FixedEmbedder({"alpha beta": q})
    app = create_app(make_settings(QuerySettings), resolver=resolver_for(embedder))
    h = await auth(pool, user_id)
    async with running(app) as client:
        both = await _add(client, h, "alpha beta alpha beta")  # best lexical, mid semantic
        sem = await _add(client, h, "nothing in common")  # best semantic, no lexical
        lex = await _add(client, h, "alpha")  # weak lexical, worst semantic
        await set_vector(pool, both, unit(2, near=q, noise=0.8))
        await set_vector(pool, sem, q)
        await set_vector(pool, lex, unit(3))
        body = await _search(client, h, "alpha beta")
        assert body["mode"] == "hybrid"
        scores = {r["id"]: r["score"] for r in body["results"]}
        rows = await pool.fetch(
            "SELECT id::text, 1.0 / (1.0 + (embedding <=> $1)) AS sim, "
            "ts_rank(fts, 'alpha | beta'::tsquery) AS rank "
            "FROM memory_items WHERE user_id = $2",
            __import__("numpy").asarray(q),
            user_id,
        )
    sims = {r["id"]: float(r["sim"]) for r in rows}
    ranks = {r["id"]: float(r["rank"]) for r in rows if r["id"] != sem}

    def norm(d, k):
        lo, hi = min(d.values()), max(d.values())
        return (d[k] - lo) / (hi - lo)

    for i in (both, sem, lex):
        expected = 0.7 * norm(sims, i) + 0.3 * (norm(ranks, i) if i in ranks else 0.0)
        assert abs(scores[i] - expected) < 1e-4, (i, scores[i], expected)
    assert [r["id"] for r in body["results"]] == sorted(scores, key=lambda k: -scores[k])


async def test_full_text_only_without_embedder_failed_embedding_or_no_ready_vectors(
    make_settings, pool, user_id
):
    h = await auth(pool, user_id)
    cases = [None, FailingEmbedder(), FixedEmbedder({"tea": unit(9)})]
    for n, embedder in enumerate(cases):
        resolver = resolver_for(embedder)
        app = create_app(make_settings(QuerySettings), resolver=resolver)
        async with running(app) as client:
            if n == 0:
                first = await _add(client, h, "green tea in the afternoon")
                await _add(client, h, "black coffee at dawn")
            if n == 1:
                await set_vector(pool, first, unit(9))  # vectors exist, the query's failed
            if n == 2:
                await pool.execute(
                    "UPDATE memory_items SET embedding_state = 'pending', "
                    "embedding = NULL WHERE user_id = $1",
                    user_id,
                )
            body = await _search(client, h, "tea")
            assert body["mode"] == "fts_only", (n, body)
            assert [r["id"] for r in body["results"]] == [first]
            assert body["results"][0]["signals"] == {"fts": True, "semantic": False}
            metrics = (await client.get("/metrics")).text
            assert 'engram_searches_total{mode="fts_only"} 1.0' in metrics


async def test_semantic_only_when_nothing_matches_lexically(make_settings, pool, user_id):
    q = unit(20)
    app = create_app(
        make_settings(QuerySettings), resolver=resolver_for(FixedEmbedder({"vehicle": q}))
    )
    h = await auth(pool, user_id)
    async with running(app) as client:
        near = await _add(client, h, "drives a red hatchback")
        far = await _add(client, h, "likes jazz")
        await set_vector(pool, near, unit(21, near=q, noise=0.3))
        await set_vector(pool, far, unit(22))
        body = await _search(client, h, "vehicle")
        assert body["mode"] == "semantic_only"
        assert [r["id"] for r in body["results"]] == [near, far]
        assert body["results"][0]["score"] == 1.0 and body["results"][1]["score"] == 0.0
        assert all(r["signals"] == {"fts": False, "semantic": True} for r in body["results"])
        body = await _search(client, h, "*")
        assert body["mode"] == "match_all"
        metrics = (await client.get("/metrics")).text
        assert 'engram_searches_total{mode="semantic_only"} 1.0' in metrics
        assert 'engram_searches_total{mode="match_all"} 1.0' in metrics


async def test_ties_go_to_the_newer_item_then_the_smaller_id(make_settings, pool, user_id):
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        # three texts that rank alike (said again, one text would confirm one memory);
        # importance 1 never fades, so the day's difference leaves the scores tied
        ids = [await _add(client, h, f"identical twin text {w}") for w in ("one", "two", "six")]
        await pool.execute(
            "UPDATE memory_items SET created_at = now() - interval '1 day', importance = 1 "
            "WHERE id = $1::uuid",
            ids[0],
        )
        await pool.execute(
            "UPDATE memory_items SET created_at = '2030-01-01' WHERE id = ANY($1::uuid[])", ids[1:]
        )
        body = await _search(client, h, "identical twin")
    assert {r["score"] for r in body["results"]} == {1.0}
    assert [r["id"] for r in body["results"]] == sorted(ids[1:], key=uuid.UUID) + [ids[0]]


async def test_a_memory_never_read_fades_below_one_read_lately(make_settings, pool, user_id):
    """Jarvus's importance and last access on real PostgreSQL: two memories matching the
    query alike, stored a year ago; the one read yesterday ranks first."""
    app = create_app(make_settings(QuerySettings))
    h = await auth(pool, user_id)
    async with running(app) as client:
        unread = await _add(client, h, "window seat on long flights")
        read = await _add(client, h, "window seat on short flights")
        await pool.execute(
            "UPDATE memory_items SET created_at = now() - interval '365 days' WHERE user_id = $1",
            user_id,
        )
        await pool.execute(
            "UPDATE memory_items SET last_accessed_at = now() - interval '1 day' "
            "WHERE id = $1::uuid",
            read,
        )
        body = await _search(client, h, "window seat flights")
    scores = {r["id"]: r["score"] for r in body["results"]}
    assert [r["id"] for r in body["results"]] == [read, unread]
    assert scores[unread] < 0.85 * scores[read]


async def test_a_user_with_50_items_among_many_still_gets_k_results(make_settings, pool):
    """The filtered-HNSW trap: many rows of another user near the query must not
    starve a small user's result, through either the exact or the index path."""
    import numpy as np

    from services.query.ranking import memories as search_module
    from shared.embeddings import vector_index

    big, small = f"big-{uuid.uuid4().hex[:8]}", f"small-{uuid.uuid4().hex[:8]}"
    q = np.asarray(unit(100), dtype=np.float32)
    rng = np.random.default_rng(7)
    await pool.execute("INSERT INTO users (id) VALUES ($1), ($2)", big, small)

    def rows(user, n, spread):
        vecs = q + spread * rng.standard_normal((n, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return [(user, "fact", f"note {i}", v, "ready") for i, v in enumerate(vecs)]

    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "memory_items",
            records=rows(big, 6000, 0.02) + rows(small, 50, 0.2),
            columns=["user_id", "type", "content", "embedding", "embedding_state"],
        )
    # as the embedder does once a user passes the exact-scan limit
    await vector_index.index_user(pool, big, "memory", settle_s=0)
    params = search_module.SearchParams(query="zebra", limit=20)
    for user in (small, big):
        result = await search_module.search(pool, params, user_id=user, vector=list(q))
        assert len(result.hits) == 20 and {h.user_id for h in result.hits} == {user}
        assert result.mode == "semantic_only"
    # force the index path for the small user too: iterative scan must still fill k
    async with pool.acquire() as conn:
        filters = [small, None, "active", None, None, False, None]
        got = await search_module.semantic_candidates(conn, "any", small, filters, list(q))
    assert len(got) == search_module.CANDIDATES_PER_SIGNAL
    assert {r["user_id"] for r in got} == {small}
    # and the big user's search really walks the HNSW index (not an exact scan)
    await pool.execute("ANALYZE memory_items")
    filters[0] = big
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(walk_settings())
        plan = await conn.fetch(
            "EXPLAIN " + search_module.index_statement("user", 384), *filters, q
        )
        used = await _indexes_in(conn, plan)
    assert "memory_items_embedding_hnsw_idx (hnsw)" in used, plan


async def test_the_lexical_side_reads_only_the_users_own_words(pool):
    """Migration 0022: a user's search matches their words through per-user keys;
    the keys are the row's own lexemes, the ranking is the one over `fts`, and
    another user's rows holding the same words never come back."""
    from services.query.ranking import memories as search_module

    me, other = f"lex-{uuid.uuid4().hex[:8]}", f"lex-{uuid.uuid4().hex[:8]}"
    await pool.execute("INSERT INTO users (id) VALUES ($1), ($2)", me, other)
    mine = [
        (None, "Walked the dogs along the river before breakfast"),
        ("diet", "Vegetarian; never eats fish; the river café is a favourite"),
        (None, "Zürich trip: the dogs stayed with Ana, crème brûlée twice"),
        (None, "Quarterly report due Friday"),
    ]
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "memory_items",
            records=[(me, "fact", k, c) for k, c in mine]
            + [
                (other, "fact", None, f"the dogs and the river, the river and the dogs {i}")
                for i in range(20)
            ],  # one live memory per text (migration 0110)
            columns=["user_id", "type", "key", "content"],
        )
    # the index keys are exactly the user's hashes of the stored `fts` lexemes
    # (the same text and configuration as the generated column, a NULL key too)
    assert await pool.fetchval(
        """SELECT bool_and(memory_user_lexemes(user_id, key, content)::bigint[]
                         = ARRAY(SELECT hashtextextended(user_id || chr(31) || w, 0)
                                 FROM unnest(tsvector_to_array(fts)) AS w))
           FROM memory_items WHERE user_id IN ($1, $2)""",
        me,
        other,
    )
    filters = [me, None, "active", None, None, False, None]
    for query in ("dogs river", "RIVER", "Zürich crème brûlée", "fish diet", "friday report"):
        new = await pool.fetch(search_module.STATEMENTS[("user", "lexical")], *filters, query)
        # the same statement through (user_id, fts) as before migration 0022
        old = await pool.fetch(search_module.STATEMENTS[("any", "lexical")], *filters, query)
        assert new, query
        assert [(r["id"], r["rank"]) for r in new] == [(r["id"], r["rank"]) for r in old]
        assert {r["user_id"] for r in new} == {me}
    none = await pool.fetch(search_module.STATEMENTS[("user", "lexical")], *filters, "banana")
    assert none == []
    # the plan: the per-user keys, without AND-ing a scan of all the user's rows
    await pool.execute("ANALYZE memory_items")
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(
            "EXPLAIN " + search_module.STATEMENTS[("user", "lexical")], *filters, "dogs"
        )
        used = await _indexes_in(conn, rows)
    plan = "\n".join(r[0] for r in rows)
    assert "memory_items_user_lexemes_idx (gin)" in used and "BitmapAnd" not in plan, plan


async def test_a_settings_change_applies_to_the_very_next_search(make_settings, pool, user_id):
    """The user's embedding settings are read with the API key (one statement): turning
    embeddings off, then forgetting the settings, changes the next search's mode."""
    from shared.embeddings import ProviderSettingsIn, put_provider_settings
    from shared.embeddings.local import LocalEmbedder

    model = LocalEmbedder()
    settings = make_settings(QuerySettings)
    app = create_app(settings)  # the default resolver, as deployed
    h = await auth(pool, user_id)
    async with running(app) as client:
        para = await _add(client, h, "Drives a crimson automobile")
        lex = await _add(client, h, "The car park near the office closes at nine")
        for item, vector in zip(
            (para, lex), await model.embed(["Drives a crimson automobile", "car park"]), strict=True
        ):
            await set_vector(pool, item, vector)
        first = await _search(client, h, "red car")
        off = ProviderSettingsIn(enabled=False, provider="local", model="all-MiniLM-L6-v2")
        await put_provider_settings(pool, user_id, off, settings)
        second = await _search(client, h, "red car")
        await pool.execute("DELETE FROM embedding_settings WHERE user_id = $1", user_id)
        third = await _search(client, h, "red car")
    assert first["mode"] == third["mode"] == "hybrid"
    assert para in [r["id"] for r in first["results"]]
    assert second["mode"] == "fts_only"
    assert [r["id"] for r in second["results"]] == [lex]
