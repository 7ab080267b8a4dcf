-- Long-term memory: themes, memory items, people, summaries, checkpoints,
-- per-user embedding settings, API keys.

CREATE TABLE themes (
    user_id      text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    slug         text NOT NULL,
    display_name text NOT NULL,
    description  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, slug)
);

CREATE TABLE people (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name       text,
    relation   text,
    aliases    text[] NOT NULL DEFAULT '{}',
    metadata   jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (name IS NOT NULL OR relation IS NOT NULL)
);
CREATE INDEX people_user_idx ON people (user_id);

CREATE TABLE memory_items (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id            text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- 'personal', or shared with the members of one chat (provider + chat_id)
    scope              text NOT NULL DEFAULT 'personal' CHECK (scope IN ('personal', 'chat')),
    provider           text,
    chat_id            text,
    namespace          text NOT NULL DEFAULT 'default',
    theme              text NOT NULL DEFAULT 'general',
    type               text NOT NULL CHECK (type IN (
                           'preference', 'fact', 'instruction', 'summary', 'procedure',
                           'episode', 'decision', 'workflow', 'other')),
    category           text,
    key                text,
    content            text NOT NULL,
    data               jsonb NOT NULL DEFAULT '{}',
    tags               text[] NOT NULL DEFAULT '{}',
    subjects           uuid[] NOT NULL DEFAULT '{}',
    source             text,
    source_context     text,
    source_message_id  bigint REFERENCES messages (id) ON DELETE SET NULL,
    episode_id         uuid REFERENCES episodes (id) ON DELETE SET NULL,
    confidence         real,
    importance         real NOT NULL DEFAULT 0.5,
    status             text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'archived')),
    expires_at         timestamptz,
    superseded_at      timestamptz,
    superseded_by      uuid REFERENCES memory_items (id) ON DELETE SET NULL,
    last_verified_at   timestamptz,
    last_accessed_at   timestamptz,
    access_count       integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    fts                tsvector GENERATED ALWAYS AS (
                           to_tsvector('english', coalesce(key, '') || ' ' || content)
                       ) STORED,
    embedding          vector({{EMBEDDING_DIM}}),
    embedding_state    text NOT NULL DEFAULT 'pending'
                       CHECK (embedding_state IN ('pending', 'ready', 'error')),
    embedding_error    text,
    embedding_provider text,
    embedding_model    text,
    embedding_dims     integer,
    embedded_at        timestamptz
);
CREATE INDEX memory_items_user_time_idx ON memory_items (user_id, created_at DESC);
CREATE INDEX memory_items_user_theme_idx ON memory_items (user_id, theme, created_at DESC);
CREATE INDEX memory_items_user_type_idx ON memory_items (user_id, type);
CREATE INDEX memory_items_fts_idx ON memory_items USING gin (fts);
CREATE INDEX memory_items_subjects_idx ON memory_items USING gin (subjects);
CREATE INDEX memory_items_pending_idx ON memory_items (id) WHERE embedding_state = 'pending';
-- Navi's facts: one value per (user, namespace, category, key)
CREATE UNIQUE INDEX memory_items_fact_key_idx ON memory_items (user_id, namespace, category, key)
    WHERE category IS NOT NULL AND key IS NOT NULL;

-- Navi's per-user narrative summary.
CREATE TABLE user_summaries (
    user_id    text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    summary    text NOT NULL,
    fact_count integer NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Jarvus's short-term thread checkpoints.
CREATE TABLE checkpoints (
    user_id       text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    thread_id     text NOT NULL,
    checkpoint_id text NOT NULL,
    parent_id     text,
    agent_id      text,
    step          integer NOT NULL DEFAULT 0,
    state         jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, thread_id, checkpoint_id)
);
CREATE INDEX checkpoints_latest_idx ON checkpoints (user_id, thread_id, created_at DESC);

-- Per-user embedding provider (Nova 3.1.3); api_key is encrypted at rest.
CREATE TABLE embedding_settings (
    user_id       text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    enabled       boolean NOT NULL DEFAULT true,
    provider      text NOT NULL CHECK (provider IN ('local', 'openai', 'ollama')),
    endpoint_url  text,
    model         text NOT NULL,
    api_key_enc   bytea,
    dimensions    integer,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Bearer keys: stored as a SHA-256 of the secret; admin keys have no user.
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     text REFERENCES users (id) ON DELETE CASCADE,
    name        text,
    key_hash    text NOT NULL UNIQUE,
    prefix      text NOT NULL,
    is_admin    boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CHECK (is_admin OR user_id IS NOT NULL)
);
