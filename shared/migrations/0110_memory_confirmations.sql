-- Memory that stays clean (issue 31): an add whose content matches a live memory
-- of the same user, scope, namespace and subjects confirms it instead of storing
-- another (docs/memory.md, "Duplicates").
--
-- * confirmations / last_confirmed_at / sources: how many times, when last, and
--   from where (the last 50 confirmations' origins) a memory was said again.
-- * dedupe_key: the memory's identity for the exact-match rule, computed here
--   whatever writes the row: scope, provider, chat, namespace, the subject set
--   (sorted) and the content with case, runs of white space and end punctuation
--   ignored. Navi's keyed facts (category and key) are identified by their key
--   and have none; nor have episodes (Jarvus's actions, feedback and workflow
--   runs: each row is one occurrence, two identical clicks are two events).
-- * a unique index over the live rows' keys: two identical adds racing store one
--   row (the writer's INSERT ... ON CONFLICT confirms the other).
-- * one confidence scale, 0-1: values saved on the old 0-100 scale are divided
--   by 100.
-- * status 'merged': a memory found to repeat an older one (kept for history,
--   superseded_by the survivor).
-- Existing live duplicates are merged first: the oldest stays, the others are
-- marked merged into it with one audit line each, and the survivor counts them
-- as confirmations. The column is STORED: adding it
-- rewrites memory_items once (writes wait for it).

CREATE FUNCTION memory_subject_key(subjects uuid[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(DISTINCT s::text, ',' ORDER BY s::text), '')
    FROM unnest(subjects) AS s
$$;

CREATE FUNCTION memory_content_key(content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(btrim(regexp_replace(content, '\s+', ' ', 'g'), ' .!?;,:'))
$$;

ALTER TABLE memory_items
    ADD COLUMN confirmations integer NOT NULL DEFAULT 0,
    ADD COLUMN last_confirmed_at timestamptz,
    ADD COLUMN sources jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN dedupe_key text GENERATED ALWAYS AS (
        CASE WHEN (category IS NOT NULL AND key IS NOT NULL) OR type = 'episode' THEN NULL
             ELSE md5(scope || E'\x1f' || coalesce(provider, '') || E'\x1f'
                      || coalesce(chat_id, '') || E'\x1f' || namespace || E'\x1f'
                      || memory_subject_key(subjects) || E'\x1f'
                      || memory_content_key(content))
        END
    ) STORED;

ALTER TABLE memory_items DROP CONSTRAINT memory_items_status_check,
    ADD CONSTRAINT memory_items_status_check CHECK (status IN ('active', 'archived', 'merged'));

UPDATE memory_items SET confidence = confidence / 100 WHERE confidence > 1;
UPDATE fact_reviews SET confidence = confidence / 100 WHERE confidence > 1;

WITH live AS (
    SELECT id, user_id, dedupe_key, source, episode_id, source_message_id, created_at,
           first_value(id) OVER w AS keeper, row_number() OVER w AS n
    FROM memory_items
    WHERE dedupe_key IS NOT NULL AND status = 'active' AND superseded_at IS NULL
    WINDOW w AS (PARTITION BY user_id, dedupe_key ORDER BY created_at, id)
),
dups AS (SELECT * FROM live WHERE n > 1),
marked AS (
    UPDATE memory_items m
    SET status = 'merged', superseded_at = now(), superseded_by = d.keeper, updated_at = now()
    FROM dups d WHERE m.id = d.id
),
counted AS (
    UPDATE memory_items m
    SET confirmations = m.confirmations + c.n, last_confirmed_at = c.last,
        sources = m.sources || c.sources
    FROM (
        SELECT keeper, count(*) AS n, max(created_at) AS last,
               jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                   'source', source, 'episode_id', episode_id,
                   'message_id', source_message_id, 'memory_id', id, 'at', created_at))
                   ORDER BY created_at) AS sources
        FROM dups GROUP BY keeper
    ) c
    WHERE m.id = c.keeper
)
INSERT INTO audit_log (user_id, actor, action, entity, entity_id, details)
SELECT user_id, 'migration', 'merge', 'memory', id::text,
       jsonb_build_object('into', keeper, 'rule', 'same text')
FROM dups;

CREATE UNIQUE INDEX memory_items_live_content_idx ON memory_items (user_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status = 'active' AND superseded_at IS NULL;
