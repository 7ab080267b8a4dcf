-- Per-chat order across turns and episode events (docs/contracts.md, "Episode closes").
--
-- A close event records its time. closed_by says how an episode closed: 'event'
-- (an episode.closed event: closed_at is the event's time, and later turns of the
-- chat never join it), 'stale' (the stale window or the sweeper: closed_at follows
-- the last turn) or 'started' (a new session in the chat began). A close that
-- finds no episode yet (its turns are still on their way) is kept in
-- episode_closes until the turns it closes arrive.
ALTER TABLE episodes ADD COLUMN closed_by text
    CHECK (closed_by IN ('event', 'stale', 'started'));
UPDATE episodes SET closed_by = 'stale' WHERE status = 'closed';

-- When the episode last became due for extraction (wall clock), for the
-- close-to-summary latency and the waiting gauge; no index, so touches stay HOT.
ALTER TABLE episodes ADD COLUMN extract_due_since timestamptz;
UPDATE episodes SET extract_due_since = updated_at WHERE extract_due;

CREATE TABLE episode_closes (
    event_id    uuid PRIMARY KEY,
    user_id     text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    provider    text NOT NULL,
    chat_id     text NOT NULL,
    episode_id  uuid,
    closed_at   timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX episode_closes_chat_idx ON episode_closes (user_id, provider, chat_id, closed_at);
CREATE INDEX episode_closes_episode_idx ON episode_closes (episode_id) WHERE episode_id IS NOT NULL;
