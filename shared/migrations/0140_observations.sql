-- Consolidation (issue 31.2; docs/extractor.md, "Consolidation"): clusters of a
-- user's related memories become one observation, a memory_items row of type
-- 'observation' (Navi's keyed upsert: category 'observation', key
-- 'seed:<the cluster's first memory>'), refined in place as evidence arrives;
-- each change is an audit line and the wording it replaced is kept in the row's
-- data.history.
--
-- * observation_evidence: the memories an observation rests on (their turns and
--   episodes are the memories' own source_message_id and episode_id).
-- * consolidation_state: per user, when a run was asked for (API, CLI, a
--   memory change), when the last one started and finished, and what it did.

ALTER TABLE memory_items DROP CONSTRAINT memory_items_type_check,
    ADD CONSTRAINT memory_items_type_check CHECK (type IN (
        'preference', 'fact', 'instruction', 'summary', 'procedure',
        'episode', 'decision', 'workflow', 'other', 'observation'));

CREATE TABLE observation_evidence (
    observation_id uuid NOT NULL REFERENCES memory_items (id) ON DELETE CASCADE,
    memory_id      uuid NOT NULL REFERENCES memory_items (id) ON DELETE CASCADE,
    user_id        text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    added_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (observation_id, memory_id)
);
CREATE INDEX observation_evidence_memory_idx ON observation_evidence (memory_id);
CREATE INDEX observation_evidence_user_idx ON observation_evidence (user_id);

CREATE TABLE consolidation_state (
    user_id      text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    requested_at timestamptz,
    started_at   timestamptz,
    finished_at  timestamptz,
    stats        jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX consolidation_state_due_idx ON consolidation_state (requested_at)
    WHERE requested_at IS NOT NULL;
