-- BM25 over a big user's turns without reading all of them (docs/retrieval.md,
-- "BM25 at scale").
--
-- BM25 needs, besides the turns holding a query word, the number of the user's
-- turns, their mean length and how many of them hold each word. Computed per query
-- that is a scan of every turn: ~185 ms for a user with 50,000 turns. Here each
-- user's turns are counted per speaker (a turn's document is its words plus its
-- speaker's name), kept by triggers on every insert and delete however the rows
-- are written (ingest, COPY, a cascade from the user's erasure). A turn's content
-- and speaker never change once stored (ingest inserts, ON CONFLICT DO NOTHING),
-- so an UPDATE (the embedder's vector) costs nothing here. The backfill at the end
-- reads every stored turn once; writes to messages wait for it (the trigger's lock).
CREATE TABLE message_text_stats (
    user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    speaker text NOT NULL,  -- coalesce(display_name, '')
    turns bigint NOT NULL,
    lexemes bigint NOT NULL,  -- sum of length(fts): distinct words of the content
    PRIMARY KEY (user_id, speaker)
);

CREATE FUNCTION message_text_stats_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- sorted, so concurrent batches lock the rows in one order
    INSERT INTO message_text_stats AS s (user_id, speaker, turns, lexemes)
    SELECT user_id, coalesce(display_name, ''), count(*), sum(length(fts))
    FROM added GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (user_id, speaker) DO UPDATE
        SET turns = s.turns + EXCLUDED.turns, lexemes = s.lexemes + EXCLUDED.lexemes;
    RETURN NULL;
END
$$;

CREATE FUNCTION message_text_stats_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE message_text_stats AS s
    SET turns = s.turns - r.turns, lexemes = s.lexemes - r.lexemes
    FROM (SELECT user_id, coalesce(display_name, '') AS speaker, count(*) AS turns,
                 sum(length(fts)) AS lexemes
          FROM removed GROUP BY 1, 2 ORDER BY 1, 2) AS r
    WHERE s.user_id = r.user_id AND s.speaker = r.speaker;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_text_stats_insert AFTER INSERT ON messages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION message_text_stats_added();

CREATE TRIGGER messages_text_stats_delete AFTER DELETE ON messages
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION message_text_stats_removed();

INSERT INTO message_text_stats (user_id, speaker, turns, lexemes)
SELECT user_id, coalesce(display_name, ''), count(*), sum(length(fts))
FROM messages GROUP BY 1, 2;
