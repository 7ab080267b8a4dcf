-- HNSW (cosine) on half-precision copies of the vectors: about 43% smaller than an
-- index on vector and as accurate at top-10 (docs/embeddings.md has the numbers).
-- A search uses it only when it orders by the same expression:
--   ORDER BY embedding::halfvec({{EMBEDDING_DIM}}) <=> $1::halfvec({{EMBEDDING_DIM}})
-- and, with a user filter, with pgvector 0.8's iterative scan switched on
-- (SET LOCAL hnsw.iterative_scan = relaxed_order), so a user whose rows are few
-- among many still gets k results. Rows without a vector are not indexed.
CREATE INDEX messages_embedding_hnsw_idx ON messages
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops);
CREATE INDEX memory_items_embedding_hnsw_idx ON memory_items
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops);
CREATE INDEX episodes_embedding_hnsw_idx ON episodes
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops);
