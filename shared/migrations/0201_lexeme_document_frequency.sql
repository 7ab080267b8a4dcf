-- A big user's document frequency per word, kept as the postings are written
-- (issue 30; docs/retrieval.md, "Long history: each word's best postings").
--
-- Since migration 0200 a search reads at most 2,000 postings of a word; for a word
-- in more turns than that its document frequency was still counted over all of its
-- postings (an index-only count: ~5 ms for a word in 25,000 turns, a third of a
-- search of a user of a million turns). Here it is a row per user and word: the
-- number of the user's turns holding the word in their own words and not in their
-- speaker's name (a word of a speaker's name counts every turn of that speaker,
-- from message_text_stats), which is what the search counted.
--
-- Kept by statement triggers on message_postings itself, so it follows every way
-- postings are written or removed (the triggers on messages, the embedder's fills,
-- its sweep, a cascade from the user). Rows are locked in word order, so two
-- writes of one user wait for each other and never deadlock. Only a listed user
-- (migration 0198) has postings, so only a big user's ingest pays for it.
-- A long turn's passages are not counted here: BM25 over passages counts its words
-- from the postings, as before.
CREATE TABLE message_lexeme_df (
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    lexeme  text NOT NULL,
    turns   integer NOT NULL,
    PRIMARY KEY (user_id, lexeme)
);

CREATE FUNCTION message_lexeme_df_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_lexeme_df AS d (user_id, lexeme, turns)
    SELECT a.user_id, a.lexeme, count(*)
    FROM added a
    WHERE a.part = -1 AND NOT a.by_name
    GROUP BY a.user_id, a.lexeme
    ORDER BY a.user_id, a.lexeme
    ON CONFLICT (user_id, lexeme) DO UPDATE SET turns = d.turns + excluded.turns;
    RETURN NULL;
END
$$;

CREATE FUNCTION message_lexeme_df_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE message_lexeme_df d
    SET turns = d.turns - r.n
    FROM (SELECT x.user_id, x.lexeme, count(*) AS n
          FROM removed x
          WHERE x.part = -1 AND NOT x.by_name
          GROUP BY x.user_id, x.lexeme) AS r
    WHERE d.user_id = r.user_id AND d.lexeme = r.lexeme;
    RETURN NULL;
END
$$;

CREATE TRIGGER message_postings_df_insert AFTER INSERT ON message_postings
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION message_lexeme_df_added();
CREATE TRIGGER message_postings_df_delete AFTER DELETE ON message_postings
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION message_lexeme_df_removed();

-- The postings stored before this; writes to them wait for it.
INSERT INTO message_lexeme_df (user_id, lexeme, turns)
SELECT user_id, lexeme, count(*)
FROM message_postings
WHERE part = -1 AND NOT by_name
GROUP BY user_id, lexeme;
ANALYZE message_lexeme_df;
