-- What a search reads of every candidate turn and of its neighbours besides its
-- place, kept small (docs/retrieval.md, "Long history").
--
-- For each candidate of a message search and up to 12 turns on each side of it,
-- the ranking reads the turn's length in distinct words (`length(fts)`) and, for
-- the candidate, whether it asks a question (`content ~ '\?\s*$'`). Read from the
-- turn, both detoast a long turn's words or content: at 10,000 BEAM turns ~4,000
-- tsvectors a query, most of its time once BM25 read postings (migration 0180).
-- Here they are computed once, as the turn is stored, by statement triggers on
-- every insert and delete of messages (ingest, COPY, a cascade from the user); a
-- turn's content never changes once stored. A search falls back to the turn for
-- a turn without a row. Erasure deletes the rows with the user's (user_id); an
-- archive leaves them out (the triggers rebuild them as the turns are imported).
CREATE TABLE message_shapes (
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    message_id bigint NOT NULL,
    lexemes    integer NOT NULL,  -- length(fts)
    asks       boolean NOT NULL,  -- content ~ '\?\s*$'
    PRIMARY KEY (user_id, message_id) INCLUDE (lexemes, asks)
);

CREATE FUNCTION message_shapes_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_shapes (user_id, message_id, lexemes, asks)
    SELECT user_id, id, length(fts), content ~ '\?\s*$' FROM added;
    RETURN NULL;
END
$$;

CREATE FUNCTION message_shapes_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_shapes s USING removed r
    WHERE s.user_id = r.user_id AND s.message_id = r.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_shapes_insert AFTER INSERT ON messages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION message_shapes_added();
CREATE TRIGGER messages_shapes_delete AFTER DELETE ON messages
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION message_shapes_removed();

-- The turns stored before this; writes to messages wait for it.
INSERT INTO message_shapes (user_id, message_id, lexemes, asks)
SELECT user_id, id, length(fts), content ~ '\?\s*$' FROM messages;
ANALYZE message_shapes;
