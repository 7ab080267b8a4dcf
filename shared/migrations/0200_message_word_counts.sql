-- A big user's common words, counted ahead (docs/retrieval.md, "Long history: a
-- common word's count, kept").
--
-- A big user's BM25 reads at most the newest 2,000 postings of each query word
-- (services/query/ranking/turns.py, `bm25_stats`), but a word's document
-- frequency was still counted over all its postings at every search: at a million
-- turns a common word is in tens of thousands of them, a cost that grows with the
-- user (at a million turns, p95 36.5 -> 30.1 ms with the counts kept; docs/scale.md).
-- Here the embedder counts them once (`vector_index.count_words`): for each
-- word in at least `WORDS_COUNTED_FROM` of the user's turns, how many of the turns
-- up to `upto` hold it in their own words. A search adds the postings written
-- since (`message_id > upto`, the newest end of the word's postings: a short range
-- of the primary key); a turn deleted takes itself off the counts here (the
-- postings' delete trigger below), so count + postings since = the count over all
-- postings, with nothing written on ingest. The embedder counts again when the
-- user's turns have grown by a tenth, so the postings read since stay few.
CREATE TABLE message_word_counts (
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    lexeme  text NOT NULL,
    turns   bigint NOT NULL,  -- turns with message_id <= upto holding the word (not by name)
    upto    bigint NOT NULL,
    PRIMARY KEY (user_id, lexeme) INCLUDE (turns, upto)
);

-- the user's turns when last counted (NULL: never), for the tenth's growth
ALTER TABLE message_postings_users ADD COLUMN counted_turns bigint;

-- A deleted turn's postings go (migration 0180) and, where the word's count
-- counted the turn, the count goes down with them.
CREATE OR REPLACE FUNCTION message_postings_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (
        DELETE FROM message_postings p
        USING removed r,
              unnest(message_postings_words(r.fts, coalesce(r.display_name, ''))) AS w
        WHERE p.user_id = r.user_id AND p.lexeme = w AND p.message_id = r.id AND p.part = -1
        RETURNING p.user_id, p.lexeme, p.message_id, p.by_name
    ),
    counted AS (
        SELECT c.user_id, c.lexeme, count(*) AS n
        FROM gone g
             JOIN message_word_counts c
               ON c.user_id = g.user_id AND c.lexeme = g.lexeme AND g.message_id <= c.upto
        WHERE NOT g.by_name
        GROUP BY c.user_id, c.lexeme
    )
    UPDATE message_word_counts c SET turns = c.turns - d.n
    FROM counted d
    WHERE c.user_id = d.user_id AND c.lexeme = d.lexeme;
    RETURN NULL;
END
$$;
