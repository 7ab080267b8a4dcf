-- Query service: indexes for search, facts and checkpoints.

-- The small-user probe of hybrid search counts a user's embedded rows up to a
-- threshold (exact scan below it, HNSW iterative scan above).
CREATE INDEX IF NOT EXISTS memory_items_user_ready_idx
    ON memory_items (user_id) WHERE embedding_state = 'ready';

-- Jarvus typed retrieval without a query: per user, type and namespace, by importance.
CREATE INDEX IF NOT EXISTS memory_items_user_ns_type_idx
    ON memory_items (user_id, namespace, type, importance DESC);

-- Checkpoint lineage walks parent ids within a thread.
CREATE INDEX IF NOT EXISTS checkpoints_parent_idx
    ON checkpoints (user_id, thread_id, parent_id);

-- Navi's fact search: trigram similarity where pg_trgm is installed.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        EXECUTE $sql$
            CREATE INDEX IF NOT EXISTS memory_items_fact_trgm_idx ON memory_items
            USING gin ((category || ' ' || key || ' ' || content) gin_trgm_ops)
            WHERE category IS NOT NULL AND key IS NOT NULL
        $sql$;
    END IF;
END
$$;

-- Vector index for semantic search. The embedder's migration (0010) owns it;
-- this only creates one where no HNSW index on memory_items exists yet, so the
-- query service never runs without it.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_indexes
        WHERE tablename = 'memory_items' AND indexdef ILIKE '%USING hnsw%'
    ) THEN
        CREATE INDEX memory_items_embedding_hnsw_idx ON memory_items
            USING hnsw (embedding vector_cosine_ops);
    END IF;
END
$$;
