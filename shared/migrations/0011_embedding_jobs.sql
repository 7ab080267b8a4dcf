-- Embedder bookkeeping: retry with backoff while a provider is down, rebuild progress.

-- A pending row whose provider was unavailable: how often it was tried and when to
-- try again (NULL = it waits for its EmbedRequested event, not for a retry).
ALTER TABLE messages     ADD COLUMN embedding_attempts integer NOT NULL DEFAULT 0,
                         ADD COLUMN embedding_retry_at timestamptz;
ALTER TABLE memory_items ADD COLUMN embedding_attempts integer NOT NULL DEFAULT 0,
                         ADD COLUMN embedding_retry_at timestamptz;
ALTER TABLE episodes     ADD COLUMN embedding_attempts integer NOT NULL DEFAULT 0,
                         ADD COLUMN embedding_retry_at timestamptz;

CREATE INDEX messages_embed_retry_idx ON messages (embedding_retry_at)
    WHERE embedding_state = 'pending' AND embedding_retry_at IS NOT NULL;
CREATE INDEX memory_items_embed_retry_idx ON memory_items (embedding_retry_at)
    WHERE embedding_state = 'pending' AND embedding_retry_at IS NOT NULL;
CREATE INDEX episodes_embed_retry_idx ON episodes (embedding_retry_at)
    WHERE embedding_state = 'pending' AND embedding_retry_at IS NOT NULL;

-- Rows in error are few; the gauges and the backfill find them by these.
CREATE INDEX messages_embed_error_idx ON messages (user_id) WHERE embedding_state = 'error';
CREATE INDEX memory_items_embed_error_idx ON memory_items (user_id)
    WHERE embedding_state = 'error';
CREATE INDEX episodes_embed_error_idx ON episodes (user_id) WHERE embedding_state = 'error';
CREATE INDEX episodes_pending_idx ON episodes (id) WHERE embedding_state = 'pending';

-- Rebuild-total (Nova 3.2.7): one row per user, the latest rebuild.
CREATE TABLE embedding_rebuilds (
    user_id     text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    provider    text NOT NULL,
    model       text NOT NULL,
    total       integer NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- A user's pending rows, for rebuild progress.
CREATE INDEX messages_user_pending_idx ON messages (user_id) WHERE embedding_state = 'pending';
CREATE INDEX memory_items_user_pending_idx ON memory_items (user_id)
    WHERE embedding_state = 'pending';
