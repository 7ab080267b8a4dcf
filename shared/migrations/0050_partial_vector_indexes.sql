-- The HNSW indexes hold only the rows of users who need them.
--
-- A user with at most a few thousand embedded rows of a table is searched
-- exactly (their rows through the user_id index, every distance computed): as
-- fast as the index and exact. Yet every vector written paid for an HNSW insert
-- (~2 ms of database CPU per row, bench/embed: as much as the embedding model's
-- own work is worth 15% of), and every large user's walk waded through everyone
-- else's rows (a 100k-item user among 1M: 10 candidates walked per result).
--
-- Now a row is in its table's HNSW index only when `vector_indexed`, which the
-- embedder sets for the rows of users listed in `vector_index_users` for that
-- table. The embedder lists a user once they have more embedded rows of a table
-- than its exact-scan limit, marks their existing rows (in batches), then sets
-- `ready`; searches take the index path only for a listed, ready user, and add
-- `vector_indexed` so PostgreSQL can use the partial index.
CREATE TABLE vector_index_users (
    user_id   text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind      text NOT NULL CHECK (kind IN ('message', 'memory', 'episode')),
    ready     boolean NOT NULL DEFAULT false,
    listed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, kind)
);

ALTER TABLE messages ADD COLUMN vector_indexed boolean NOT NULL DEFAULT false;
ALTER TABLE memory_items ADD COLUMN vector_indexed boolean NOT NULL DEFAULT false;
ALTER TABLE episodes ADD COLUMN vector_indexed boolean NOT NULL DEFAULT false;

DROP INDEX messages_embedding_hnsw_idx;
DROP INDEX memory_items_embedding_hnsw_idx;
DROP INDEX episodes_embedding_hnsw_idx;

-- Users who already have more rows than the exact-scan limit (5,000) keep an index.
INSERT INTO vector_index_users (user_id, kind, ready)
SELECT user_id, 'message', true FROM messages WHERE embedding_state = 'ready'
GROUP BY user_id HAVING count(*) > 5000;
INSERT INTO vector_index_users (user_id, kind, ready)
SELECT user_id, 'memory', true FROM memory_items WHERE embedding_state = 'ready'
GROUP BY user_id HAVING count(*) > 5000;
INSERT INTO vector_index_users (user_id, kind, ready)
SELECT user_id, 'episode', true FROM episodes WHERE embedding_state = 'ready'
GROUP BY user_id HAVING count(*) > 5000;

UPDATE messages SET vector_indexed = true
WHERE user_id IN (SELECT user_id FROM vector_index_users WHERE kind = 'message');
UPDATE memory_items SET vector_indexed = true
WHERE user_id IN (SELECT user_id FROM vector_index_users WHERE kind = 'memory');
UPDATE episodes SET vector_indexed = true
WHERE user_id IN (SELECT user_id FROM vector_index_users WHERE kind = 'episode');

CREATE INDEX messages_embedding_hnsw_idx ON messages
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops)
    WHERE vector_indexed;
CREATE INDEX memory_items_embedding_hnsw_idx ON memory_items
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops)
    WHERE vector_indexed;
CREATE INDEX episodes_embedding_hnsw_idx ON episodes
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops)
    WHERE vector_indexed;
