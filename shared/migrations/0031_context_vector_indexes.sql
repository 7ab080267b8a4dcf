-- HNSW indexes for context assembly's nearest-neighbour reads (bench/context:
-- without them the exact scan over a user's 50,000 messages dominated latency).
-- Queries run with hnsw.iterative_scan = relaxed_order, so a user filter still
-- yields k rows when many users share the table. Created only where no HNSW
-- index exists yet (the embedder/query migrations may own one).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_indexes
                   WHERE tablename = 'messages' AND indexdef ILIKE '%USING hnsw%') THEN
        CREATE INDEX messages_embedding_hnsw_idx ON messages
            USING hnsw (embedding vector_cosine_ops);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_indexes
                   WHERE tablename = 'memory_items' AND indexdef ILIKE '%USING hnsw%') THEN
        CREATE INDEX memory_items_embedding_hnsw_idx ON memory_items
            USING hnsw (embedding vector_cosine_ops);
    END IF;
END
$$;
