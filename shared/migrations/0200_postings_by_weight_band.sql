-- A big user's BM25 reads each query word's best postings first, and at most a
-- bounded number of them (issue 30: a user's search at 1M turns of their own;
-- docs/retrieval.md, "Long history: each word's best postings").
--
-- Until now the postings of a word (migration 0180) were ordered by turn, so a
-- search read every one of them: a word in 4% of a million turns is 40,000 rows
-- scored. Here they are ordered, within a user and a word, by the word's weight in
-- the document, in bands: BM25's term frequency part (k1 = 1.2, b = 0.5) at a fixed
-- mean length of 16 words, `tf * 2.2 / (tf + 1.2 * (0.5 + 0.5 * dl / 16))`, without
-- its constant factor (so in [0, 1)), cut into fiftieths (`band` 0 .. 49), and in a
-- band the newest turn first. For one word that is the order BM25 ranks its
-- documents in, to a fiftieth of the word's weight (exactly for documents holding
-- it once but within a band; a user's own mean length moves the rest only at the
-- edges), so a search reads the first N of each word and stops. Bands, not the
-- weight itself: a new turn's postings go at the end of their band (the turns come
-- in order), as they went at the end of their word before, where a weight put each
-- of them somewhere inside its word and made a listed user's ingest ~25% slower.
-- The key includes the band (no second index over the table: the rows hold the
-- same columns), so a delete names it too: the triggers compute it from the removed
-- document as the insert did (`message_posting_band`, the one definition).
--
-- Existing rows: the column is computed as the table is rewritten; writes to
-- messages and message_passages of listed users wait for it (measured in
-- docs/scale.md: 16M postings of one user of a million turns).
CREATE FUNCTION message_posting_band(integer, integer) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT floor(50 * $1::float8 / ($1 + 0.6 + 0.6 * $2 / 16.0))::smallint
$$;

ALTER TABLE message_postings
    ADD COLUMN band smallint GENERATED ALWAYS AS (message_posting_band(tf, dl)) STORED;
ALTER TABLE message_postings DROP CONSTRAINT message_postings_pkey;
ALTER TABLE message_postings
    ADD PRIMARY KEY (user_id, lexeme, band, message_id, part)
    INCLUDE (tf, dl, by_name, in_text);

-- A removed turn's rows, found by the key: its words with their band there.
CREATE OR REPLACE FUNCTION message_postings_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_postings p
    USING removed r,
          message_postings_rows(r.user_id, r.id, -1, r.fts, coalesce(r.display_name, '')) AS x
    WHERE p.user_id = r.user_id AND p.lexeme = x.lexeme
      AND p.band = message_posting_band(x.tf, x.dl)
      AND p.message_id = r.id AND p.part = -1;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION message_passage_postings_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_postings p
    USING removed r,
          message_postings_rows(r.user_id, r.message_id, r.idx, r.fts, r.speaker) AS x
    WHERE p.user_id = r.user_id AND p.lexeme = x.lexeme
      AND p.band = message_posting_band(x.tf, x.dl)
      AND p.message_id = r.message_id AND p.part = r.idx;
    RETURN NULL;
END
$$;

-- message_postings_words (0180) was the removed triggers' only reader.
DROP FUNCTION message_postings_words(tsvector, text);

ANALYZE message_postings;
