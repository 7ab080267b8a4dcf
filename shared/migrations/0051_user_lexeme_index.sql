-- migrate: no-transaction
-- migrate: replaces 0022_user_lexeme_index
--
-- Numbered 0022 when it was written, it landed after 0050 on the databases that
-- existed then; renumbered 0051 so files apply in one order. A database that
-- applied it as 0022 records 0051 without running it again. The index is built
-- CONCURRENTLY: writes to memory_items go on while it is built.
--
-- Memory search's full-text side reads one user's words, not everyone's.
--
-- `memory_items_user_fts_idx` (0021) is a GIN over (user_id, fts): a search for
-- `user_id = X AND fts @@ 'a' | 'b'` merges the posting lists of every user's
-- rows holding a or b with the list of all of X's rows (a 100k-item user's list
-- alone is 100,000 entries): 2-4 ms before the first row is read, ~1.5 ms for a
-- user with 1,000 items (bench/search).
--
-- Here each row's words are also indexed as keys of their own user: a 64-bit
-- hash of `user_id || chr(31) || lexeme`, one per distinct lexeme of the row's
-- `fts` (the same text search configuration and text as the generated column).
-- A search asks for the hashes of the query's lexemes for its user, so the index
-- hands back that user's matching rows and nobody else's. Hashes keep the keys
-- fixed-size (370 MB at 1M items against 556 MB for the text keys; the
-- (user_id, fts) GIN is 66 MB and stays, for admin search across users). The
-- search still checks the row's user and its `ts_rank`, so a hash collision can
-- neither cross users nor bring in a row that does not match.
CREATE OR REPLACE FUNCTION memory_user_lexemes(user_id text, key text, content text)
RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY(
        SELECT hashtextextended(user_id || chr(31) || w, 0)
        FROM unnest(tsvector_to_array(
            to_tsvector('english'::regconfig, coalesce(key, '') || ' ' || content))) AS w
    )
$$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS memory_items_user_lexemes_idx
    ON memory_items USING gin (memory_user_lexemes(user_id, key, content));
