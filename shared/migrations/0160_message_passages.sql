-- A long turn's passages (docs/embeddings.md, "Passages").
--
-- The local model reads 256 word pieces of a turn; an assistant's answer often
-- runs to thousands. The embedder cuts a turn longer than `embed_passage_chars`
-- (800) into passages (shared/embeddings/passages.py), the first of them its head
-- (stored with the turn's own vector, `messages.embedding`), and stores each
-- passage's vector and words here, in the same transaction as the turn's own
-- vector, replacing any it had: they are always of the turn's model, and a search
-- reads them only while the turn is `ready`. A search may read a long turn as
-- its passages (RankSpec.lexical_passages / semantic_passages), the turn scoring
-- its best passage's and returned once (docs/embeddings.md, "Passages").
--
-- Per user like every table (the owner is the turn's); in the partial HNSW index
-- of the same form as messages' (migration 0050) when the owner is listed for
-- messages' index (`vector_index_users`, kind 'message').
CREATE TABLE message_passages (
    message_id     bigint NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    idx            integer NOT NULL,  -- 0 is the head (its vector: messages.embedding)
    user_id        text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    start_char     integer NOT NULL,  -- where it lies in the turn's content
    end_char       integer NOT NULL,
    embedding      vector({{EMBEDDING_DIM}}) NOT NULL,
    fts            tsvector NOT NULL,  -- its words (English), for lexical scoring
    vector_indexed boolean NOT NULL DEFAULT false,
    PRIMARY KEY (message_id, idx)
);
CREATE INDEX message_passages_user_idx ON message_passages (user_id, message_id);
CREATE INDEX message_passages_embedding_hnsw_idx ON message_passages
    USING hnsw ((embedding::halfvec({{EMBEDDING_DIM}})) halfvec_cosine_ops)
    WHERE vector_indexed;

-- A turn may now be up to 1,000,000 characters (shared/events.py MAX_TURN_CHARS; a
-- pasted log is ordinary). A tsvector holds at most 1 MB: 1,000,000 characters of
-- distinct words (a log of ids) would make the INSERT fail. Its words are read from
-- the first 200,000 characters (at most ~0.7 MB whatever the text); the rest of a
-- longer turn is found by meaning (its passages). No stored turn is longer than
-- 100,000 characters, so none changes; the table is rewritten once (PostgreSQL 17+).
ALTER TABLE messages ALTER COLUMN fts
    SET EXPRESSION AS (to_tsvector('english', left(content, 200000)));
