-- Hybrid search latency (docs/query.md, "Latency").
--
-- The lexical side of a search is `user_id = $1 AND fts @@ query`. With a GIN
-- on fts alone the planner ANDs it with a bitmap of *all* the user's rows from a
-- b-tree (100,000 entries for a 100k-item user: 3-10 ms per search before a
-- single row is ranked). One GIN over (user_id, fts) (btree_gin) answers both
-- conditions inside the index. It replaces the fts-only index, so a write
-- still maintains one GIN; queries on fts alone (admin cross-user search) use
-- its second column. Without btree_gin the fts-only index stays.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS btree_gin;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'btree_gin is not available; memory search keeps the fts-only GIN';
END
$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
        CREATE INDEX IF NOT EXISTS memory_items_user_fts_idx
            ON memory_items USING gin (user_id, fts);
        DROP INDEX IF EXISTS memory_items_fts_idx;
    END IF;
END
$$;
