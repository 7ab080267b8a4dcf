-- Webhooks (issue 33.1): subscriptions, and a transactional outbox filled by triggers,
-- so an event is committed with the change that made it, whoever writes the row (the
-- one memory writer, supersession, the extractor, erasure, an import, a rebuild).

CREATE TABLE webhook_subscriptions (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- NULL: every user's events (an admin's subscription)
    user_id     text REFERENCES users (id) ON DELETE CASCADE,
    url         text NOT NULL,
    events      text[] NOT NULL DEFAULT '{}',  -- empty: every type
    secret_enc  bytea NOT NULL,                -- the signing secret, encrypted at rest
    description text,
    active      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_subscriptions_user_idx ON webhook_subscriptions (user_id) WHERE active;
CREATE INDEX webhook_subscriptions_all_idx ON webhook_subscriptions (id)
    WHERE active AND user_id IS NULL;

-- The outbox: one row per event (its id is the idempotency key receivers see).
CREATE TABLE webhook_events (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id    text NOT NULL,  -- no foreign key: user.erased outlives the user
    type       text NOT NULL,
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX webhook_events_user_idx ON webhook_events (user_id);
CREATE INDEX webhook_events_time_idx ON webhook_events (created_at);

-- One delivery per (subscription, event); at least once, with backoff, then dead.
CREATE TABLE webhook_deliveries (
    subscription_id uuid NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_id        uuid NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    user_id         text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    PRIMARY KEY (subscription_id, event_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_user_idx ON webhook_deliveries (user_id);

-- Write the event and its deliveries, if anyone listens; nothing when no one does.
CREATE FUNCTION webhook_emit(u text, kind text, data jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ev uuid;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM webhook_subscriptions s
        WHERE s.active AND (s.user_id = u OR s.user_id IS NULL)
          AND (cardinality(s.events) = 0 OR kind = ANY (s.events))
    ) THEN
        RETURN;
    END IF;
    INSERT INTO webhook_events (user_id, type, payload) VALUES (u, kind, data)
    RETURNING id INTO ev;
    INSERT INTO webhook_deliveries (subscription_id, event_id, user_id)
    SELECT s.id, ev, u FROM webhook_subscriptions s
    WHERE s.active AND (s.user_id = u OR s.user_id IS NULL)
      AND (cardinality(s.events) = 0 OR kind = ANY (s.events));
END
$$;

-- An erasure in progress (its tombstone is laid first) sends no event per row.
CREATE FUNCTION webhook_erasing(u text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM erased_users
        WHERE user_hash = encode(sha256(convert_to(u, 'UTF8')), 'hex')
    )
$$;

CREATE FUNCTION webhook_memory_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    r memory_items;
    kind text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
        kind := 'memory.deleted';
    ELSE
        r := NEW;
        IF TG_OP = 'INSERT' THEN
            kind := CASE WHEN NEW.category IS NOT NULL AND NEW.key IS NOT NULL
                         THEN 'fact.learned' ELSE 'memory.learned' END;
        ELSIF NEW.status = 'merged' AND OLD.status IS DISTINCT FROM 'merged' THEN
            kind := 'memory.merged';  -- a duplicate folded into the memory it repeats
        ELSIF OLD.superseded_by IS NULL AND NEW.superseded_by IS NOT NULL THEN
            kind := 'memory.superseded';
        ELSIF OLD.status = 'active' AND NEW.status = 'archived' THEN
            kind := 'memory.archived';
        ELSIF OLD.content IS DISTINCT FROM NEW.content OR OLD.data IS DISTINCT FROM NEW.data THEN
            kind := 'memory.updated';
        ELSE
            RETURN NULL;  -- reads counted, vectors stored: not an event
        END IF;
    END IF;
    IF webhook_erasing(r.user_id) THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_emit(r.user_id, kind, jsonb_build_object(
        'id', r.id, 'type', r.type, 'theme', r.theme,
        'content', CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE r.content END,
        'category', r.category, 'key', r.key, 'source', r.source, 'status', r.status,
        'superseded_by', r.superseded_by, 'created_at', r.created_at,
        'updated_at', r.updated_at));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_memory_event AFTER INSERT OR UPDATE OR DELETE ON memory_items
    FOR EACH ROW EXECUTE FUNCTION webhook_memory_event();

CREATE FUNCTION webhook_episode_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.summary_text IS NOT NULL
       AND OLD.summary_text IS DISTINCT FROM NEW.summary_text
       AND NOT webhook_erasing(NEW.user_id) THEN
        PERFORM webhook_emit(NEW.user_id, 'episode.summarised', jsonb_build_object(
            'id', NEW.id, 'provider', NEW.provider, 'chat_id', NEW.chat_id,
            'started_at', NEW.started_at, 'closed_at', NEW.closed_at,
            'summary_text', NEW.summary_text));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_episode_event AFTER UPDATE OF summary_text ON episodes
    FOR EACH ROW EXECUTE FUNCTION webhook_episode_event();

CREATE FUNCTION webhook_rebuild_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL THEN
        PERFORM webhook_emit(NEW.user_id, 'rebuild.finished', jsonb_build_object(
            'provider', NEW.provider, 'model', NEW.model, 'total', NEW.total,
            'started_at', NEW.started_at, 'finished_at', NEW.finished_at));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_rebuild_event AFTER UPDATE OF finished_at ON embedding_rebuilds
    FOR EACH ROW EXECUTE FUNCTION webhook_rebuild_event();

-- The user's own subscriptions are gone with them (cascade); admins hear of it.
CREATE FUNCTION webhook_user_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit(OLD.id, 'user.erased', jsonb_build_object('user_id', OLD.id));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_user_event AFTER DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION webhook_user_event();
