-- BM25 over a long turn's passages for a big user without reading all of them
-- (docs/retrieval.md, "Issue 27: long turns as passages"; migration 0090 did the
-- same for turns).
--
-- With its passages read as documents (RankSpec.lexical_passages), a long turn
-- is no document itself: BM25's corpus is the turns without passages plus the
-- passages, each with its speaker's name. The statistics a big user's search
-- reads (message_text_stats, per user and speaker) now also count the turns that
-- have passages and their words, and the passages and theirs, kept by triggers
-- on message_passages however rows are written or removed (the embedder
-- replacing a turn's passages, a cascade from the turn or the user). A passage
-- row carries its turn's speaker and, on the head (idx 0), its turn's word count,
-- so the triggers need not read the turn (gone already in a cascade).
ALTER TABLE message_passages
    ADD COLUMN speaker text NOT NULL DEFAULT '',  -- coalesce(display_name, '') of the turn
    ADD COLUMN turn_lexemes integer NOT NULL DEFAULT 0;  -- length(fts) of the turn (idx 0)
CREATE INDEX message_passages_fts_idx ON message_passages USING gin (fts);

ALTER TABLE message_text_stats
    ADD COLUMN long_turns bigint NOT NULL DEFAULT 0,  -- turns that have passages
    ADD COLUMN long_lexemes bigint NOT NULL DEFAULT 0,  -- their sum of length(fts)
    ADD COLUMN passages bigint NOT NULL DEFAULT 0,
    ADD COLUMN passage_lexemes bigint NOT NULL DEFAULT 0;

CREATE FUNCTION message_passage_stats_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_text_stats AS s (user_id, speaker, turns, lexemes, long_turns,
                                         long_lexemes, passages, passage_lexemes)
    SELECT user_id, speaker, 0, 0, count(*) FILTER (WHERE idx = 0),
           coalesce(sum(turn_lexemes) FILTER (WHERE idx = 0), 0), count(*),
           coalesce(sum(length(fts)), 0)
    FROM added GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (user_id, speaker) DO UPDATE
        SET long_turns = s.long_turns + EXCLUDED.long_turns,
            long_lexemes = s.long_lexemes + EXCLUDED.long_lexemes,
            passages = s.passages + EXCLUDED.passages,
            passage_lexemes = s.passage_lexemes + EXCLUDED.passage_lexemes;
    RETURN NULL;
END
$$;

CREATE FUNCTION message_passage_stats_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE message_text_stats AS s
    SET long_turns = s.long_turns - r.long_turns, long_lexemes = s.long_lexemes - r.long_lexemes,
        passages = s.passages - r.passages, passage_lexemes = s.passage_lexemes - r.lexemes
    FROM (SELECT user_id, speaker, count(*) FILTER (WHERE idx = 0) AS long_turns,
                 coalesce(sum(turn_lexemes) FILTER (WHERE idx = 0), 0) AS long_lexemes,
                 count(*) AS passages, sum(length(fts)) AS lexemes
          FROM removed GROUP BY 1, 2 ORDER BY 1, 2) AS r
    WHERE s.user_id = r.user_id AND s.speaker = r.speaker;
    RETURN NULL;
END
$$;

CREATE TRIGGER message_passages_stats_insert AFTER INSERT ON message_passages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION message_passage_stats_added();
CREATE TRIGGER message_passages_stats_delete AFTER DELETE ON message_passages
    REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION message_passage_stats_removed();

-- Passages written before this (none where 0160 and this are applied together).
UPDATE message_passages p
SET speaker = coalesce(m.display_name, ''), turn_lexemes = length(m.fts)
FROM messages m WHERE m.id = p.message_id;
UPDATE message_text_stats s
SET long_turns = a.long_turns, long_lexemes = a.long_lexemes, passages = a.passages,
    passage_lexemes = a.lexemes
FROM (SELECT user_id, speaker, count(*) FILTER (WHERE idx = 0) AS long_turns,
             coalesce(sum(turn_lexemes) FILTER (WHERE idx = 0), 0) AS long_lexemes,
             count(*) AS passages, sum(length(fts)) AS lexemes
      FROM message_passages GROUP BY 1, 2) AS a
WHERE s.user_id = a.user_id AND s.speaker = a.speaker;
