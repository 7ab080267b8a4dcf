-- BM25 for a big user reads the postings of the query's words, not the turns
-- (docs/retrieval.md, "Long history").
--
-- Before this, a big user's BM25 (migrations 0090, 0161) read every turn holding
-- a query word and unnested its whole tsvector: for one chat of 10,000 turns a
-- common word is in half of them, ~450 ms a query. Here every document BM25 reads
-- (a turn, each with its speaker's name, and a long turn's passages, each with
-- its turn's speaker's name) has one row per distinct word: how often it occurs
-- there (tf) and the document's length in distinct words (dl), both taken from the
-- same tsvector the full scan builds (`fts || to_tsvector('english', speaker)`), so
-- the numbers are the full scan's by construction. A search reads, per query word,
-- that word's rows for its user (the primary key, an index-only scan).
--
-- Kept by triggers on every insert and delete of messages and message_passages
-- however rows are written (ingest, COPY, the embedder replacing a turn's
-- passages, a cascade from the turn or the user). A turn's content and speaker
-- never change once stored (ingest inserts, ON CONFLICT DO NOTHING), so an UPDATE
-- (the embedder's vector, an episode moved) costs nothing here. Whether a turn has
-- passages (BM25 over passages then reads them instead of the turn) is read from
-- message_passages at search time: marking the turn's rows here rewrote them all
-- when its passages came (3x the passages' own write on BEAM's long turns).
-- Erasure deletes the rows with the rest of the user's (user_id); an archive leaves
-- them out (derived, rebuilt by the triggers as the turns are imported).
CREATE TABLE message_postings (
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    lexeme     text NOT NULL,
    message_id bigint NOT NULL,
    part       integer NOT NULL,  -- -1: the turn; 0, 1, ...: its passage of that idx
    tf         integer NOT NULL,  -- occurrences in the document (cardinality of positions)
    dl         integer NOT NULL,  -- the document's distinct words, its speaker's name's too
    by_name    boolean NOT NULL,  -- the word is one of the speaker's name
    in_text    boolean NOT NULL,  -- the word is one of the turn's (passage's) own words
    PRIMARY KEY (user_id, lexeme, message_id, part) INCLUDE (tf, dl, by_name, in_text)
);

-- The rows of a document: its tsvector `v` (words and speaker's name) and `words`,
-- the name's words; whether a word of the name is also one of the document's own
-- is looked up only for those few words (no tsquery: any lexeme is safe).
-- Arguments: user_id, message_id, part, the document's own tsvector, its speaker.
CREATE FUNCTION message_postings_rows(text, bigint, integer, tsvector, text) RETURNS TABLE (user_id text, lexeme text, message_id bigint, part integer, tf integer,
                 dl integer, by_name boolean, in_text boolean)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT $1, x.lexeme, $2, $3, coalesce(cardinality(x.positions), 1), length(d.v),
           x.lexeme = ANY(d.words),
           CASE WHEN x.lexeme = ANY(d.words) THEN x.lexeme = ANY(tsvector_to_array($4))
                ELSE true END
    FROM (SELECT $4 || n AS v, tsvector_to_array(n) AS words
          FROM to_tsvector('english', $5) AS n) AS d,
         unnest(d.v) AS x
$$;

-- The words of a document, to find its rows by the primary key.
CREATE FUNCTION message_postings_words(tsvector, text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT tsvector_to_array($1 || to_tsvector('english', $2))
$$;

CREATE FUNCTION message_postings_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
    SELECT r.*
    FROM added a,
         message_postings_rows(a.user_id, a.id, -1, a.fts, coalesce(a.display_name, '')) AS r;
    RETURN NULL;
END
$$;

CREATE FUNCTION message_postings_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_postings p
    USING removed r,
          unnest(message_postings_words(r.fts, coalesce(r.display_name, ''))) AS w
    WHERE p.user_id = r.user_id AND p.lexeme = w AND p.message_id = r.id AND p.part = -1;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_postings_insert AFTER INSERT ON messages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION message_postings_added();
CREATE TRIGGER messages_postings_delete AFTER DELETE ON messages
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION message_postings_removed();

-- A turn's passages.
CREATE FUNCTION message_passage_postings_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
    SELECT r.*
    FROM added a, message_postings_rows(a.user_id, a.message_id, a.idx, a.fts, a.speaker) AS r;
    RETURN NULL;
END
$$;

CREATE FUNCTION message_passage_postings_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_postings p
    USING removed r, unnest(message_postings_words(r.fts, r.speaker)) AS w
    WHERE p.user_id = r.user_id AND p.lexeme = w AND p.message_id = r.message_id
      AND p.part = r.idx;
    RETURN NULL;
END
$$;

CREATE TRIGGER message_passages_postings_insert AFTER INSERT ON message_passages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION message_passage_postings_added();
CREATE TRIGGER message_passages_postings_delete AFTER DELETE ON message_passages
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION message_passage_postings_removed();

-- The turns and passages stored before this; writes to them wait for it.
INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
SELECT r.*
FROM messages m,
     message_postings_rows(m.user_id, m.id, -1, m.fts, coalesce(m.display_name, '')) AS r;
INSERT INTO message_postings (user_id, lexeme, message_id, part, tf, dl, by_name, in_text)
SELECT r.*
FROM message_passages p,
     message_postings_rows(p.user_id, p.message_id, p.idx, p.fts, p.speaker) AS r;
ANALYZE message_postings;
