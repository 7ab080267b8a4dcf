-- Extractor: what each extraction saw, searchable episode summaries, the fact review list.

-- turn_count at the last extraction: a turn stored later (even with an old
-- timestamp) makes the episode due for re-extraction.
ALTER TABLE episodes ADD COLUMN extracted_turn_count integer;
ALTER TABLE episodes ADD COLUMN summary_fts tsvector
    GENERATED ALWAYS AS (to_tsvector('english', coalesce(summary_text, ''))) STORED;
CREATE INDEX episodes_summary_fts_idx ON episodes USING gin (summary_fts);
-- the sweeper's second question: closed episodes with activity after their extraction
CREATE INDEX episodes_reextract_idx ON episodes (last_active_at)
    WHERE status = 'closed'
      AND (extracted_at IS NULL OR turn_count IS DISTINCT FROM extracted_turn_count);

-- Nous F010.4: candidate facts below the confidence threshold (or otherwise held
-- back) wait here for a person to review; they are not memory.
CREATE TABLE fact_reviews (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id        text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    episode_id     uuid REFERENCES episodes (id) ON DELETE CASCADE,
    subject        text,
    content        text NOT NULL,
    category       text,
    confidence     real,
    source         text,
    source_context text,
    reason         text NOT NULL,
    data           jsonb NOT NULL DEFAULT '{}',
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'accepted', 'rejected')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    reviewed_at    timestamptz
);
CREATE UNIQUE INDEX fact_reviews_episode_content_idx ON fact_reviews (user_id, episode_id, content);
CREATE INDEX fact_reviews_user_idx ON fact_reviews (user_id, status, created_at DESC);

-- when the sweeper last asked for this episode's extraction (so it asks once per window)
ALTER TABLE episodes ADD COLUMN extract_requested_at timestamptz;
