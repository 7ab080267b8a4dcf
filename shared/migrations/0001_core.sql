-- Core tables: users, episodes, messages, processed events, audit log.
CREATE EXTENSION IF NOT EXISTS vector;
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm is not available; fact search falls back to ILIKE';
END
$$;

CREATE TABLE users (
    id           text PRIMARY KEY,
    display_name text,
    metadata     jsonb NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- An episode is one session of one user in one chat.
CREATE TABLE episodes (
    id                uuid PRIMARY KEY,
    user_id           text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    display_name      text,
    provider          text NOT NULL,
    chat_id           text NOT NULL,
    external_id       text,
    frame             text,
    status            text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'closed')),
    started_at        timestamptz NOT NULL,
    last_active_at    timestamptz NOT NULL,
    closed_at         timestamptz,
    turn_count        integer NOT NULL DEFAULT 0,
    metadata          jsonb NOT NULL DEFAULT '{}',
    -- filled by the extractor
    summary           jsonb,
    summary_text      text,
    extracted_at      timestamptz,
    extraction_error  text,
    -- embedding of summary_text, filled by the embedder
    embedding          vector({{EMBEDDING_DIM}}),
    embedding_state    text CHECK (embedding_state IN ('pending', 'ready', 'error')),
    embedding_error    text,
    embedding_provider text,
    embedding_model    text,
    embedding_dims     integer,
    embedded_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX episodes_open_chat_idx ON episodes (user_id, provider, chat_id, last_active_at DESC)
    WHERE status = 'open';
CREATE INDEX episodes_user_time_idx ON episodes (user_id, last_active_at DESC);
CREATE INDEX episodes_open_idle_idx ON episodes (last_active_at) WHERE status = 'open';

CREATE TABLE messages (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id           uuid NOT NULL UNIQUE,
    user_id            text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    episode_id         uuid NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    provider           text NOT NULL,
    chat_id            text NOT NULL,
    role               text NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    display_name       text,
    content            text NOT NULL DEFAULT '',
    tool_name          text,
    tool_args          jsonb,
    tool_result        jsonb,
    external_id        text,
    occurred_at        timestamptz NOT NULL,
    metadata           jsonb NOT NULL DEFAULT '{}',
    fts                tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    embedding          vector({{EMBEDDING_DIM}}),
    embedding_state    text NOT NULL DEFAULT 'pending'
                       CHECK (embedding_state IN ('pending', 'ready', 'error')),
    embedding_error    text,
    embedding_provider text,
    embedding_model    text,
    embedding_dims     integer,
    embedded_at        timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now()
);
-- The same platform message id never makes two rows, whatever its event id.
CREATE UNIQUE INDEX messages_external_idx ON messages (user_id, provider, chat_id, external_id)
    WHERE external_id IS NOT NULL;
CREATE INDEX messages_episode_order_idx ON messages (episode_id, occurred_at, id);
CREATE INDEX messages_user_time_idx ON messages (user_id, occurred_at DESC);
CREATE INDEX messages_fts_idx ON messages USING gin (fts);
CREATE INDEX messages_pending_idx ON messages (id) WHERE embedding_state = 'pending';

-- Event ids a consumer has applied, written in the same transaction as its effects.
CREATE TABLE processed_events (
    event_id     uuid NOT NULL,
    consumer     text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE TABLE audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    text,
    actor      text NOT NULL DEFAULT 'system',
    action     text NOT NULL,
    entity     text NOT NULL,
    entity_id  text,
    details    jsonb NOT NULL DEFAULT '{}',
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_user_idx ON audit_log (user_id, at DESC);
