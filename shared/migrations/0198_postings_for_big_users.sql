-- BM25 postings only for the users whose searches read them (docs/scale.md, "Disk
-- and memory per million turns").
--
-- The postings of migration 0180 are read only by a big user's search (one listed
-- for the HNSW index: services/query/ranking/turns.py, `bm25_stats`); a small
-- user's BM25 is computed from its turns. Written for every user they took 2.2 GB
-- per million turns, nearly half the disk a turn takes, and ~30 us per posting of
-- every turn's ingest. Here a user's postings are kept once the user is listed in
-- `message_postings_users`, which the embedder does when it lists the user for the
-- HNSW index (shared/embeddings/vector_index.py, `index_user`): list, fill from the
-- turns and passages stored, wait for the writes that started before the list,
-- fill again, set `ready`. A search reads the postings only of a `ready` user, so
-- every search is answered from complete postings or from the turns themselves.
CREATE TABLE message_postings_users (
    user_id text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    ready   boolean NOT NULL DEFAULT false
);

-- Today's big users keep theirs (complete: they were kept for everyone until now).
INSERT INTO message_postings_users (user_id, ready)
SELECT DISTINCT user_id, true FROM vector_index_users WHERE kind = 'message';

-- Everyone else's go. Writes to messages wait for it.
DELETE FROM message_postings p
WHERE NOT EXISTS (SELECT 1 FROM message_postings_users u WHERE u.user_id = p.user_id);

CREATE OR REPLACE FUNCTION message_postings_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
    SELECT r.*
    FROM added a
         JOIN message_postings_users u ON u.user_id = a.user_id,
         message_postings_rows(a.user_id, a.id, -1, a.fts, coalesce(a.display_name, '')) AS r;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION message_passage_postings_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
    SELECT r.*
    FROM added a
         JOIN message_postings_users u ON u.user_id = a.user_id,
         message_postings_rows(a.user_id, a.message_id, a.idx, a.fts, a.speaker) AS r;
    RETURN NULL;
END
$$;

ANALYZE message_postings;
