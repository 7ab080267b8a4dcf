-- Ingest touches an episode on every turn (turn_count, last_active_at). When no
-- index covers those columns the update is HOT: no index entry is written, and
-- the touch costs a third of what it did (bench/ingest).
--
-- So the indexes that held last_active_at or turn_count change, and "closed
-- with activity since its last extraction" becomes a flag, extract_due, set when
-- an episode closes or a closed episode gets a turn, cleared by the extractor.
ALTER TABLE episodes SET (fillfactor = 80);
ALTER TABLE episodes ADD COLUMN extract_due boolean NOT NULL DEFAULT false;
UPDATE episodes SET extract_due = true
WHERE status = 'closed'
  AND (extracted_at IS NULL OR turn_count IS DISTINCT FROM extracted_turn_count
       OR last_active_at > extracted_at);

DROP INDEX episodes_reextract_idx;
CREATE INDEX episodes_extract_due_idx ON episodes (id) WHERE extract_due;

-- ingest looks up each chat's current episode (open, else the latest closed)
DROP INDEX episodes_open_chat_idx;
CREATE INDEX episodes_chat_idx ON episodes (user_id, provider, chat_id, started_at);

DROP INDEX episodes_user_time_idx;
CREATE INDEX episodes_user_started_idx ON episodes (user_id, started_at DESC);

DROP INDEX episodes_open_idle_idx;
CREATE INDEX episodes_open_started_idx ON episodes (started_at) WHERE status = 'open';
