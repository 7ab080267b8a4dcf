-- messages, memory_items, episodes and message_passages hash-partitioned by user
-- (docs/scale.md, "Partitioned tables").
--
-- Each becomes PARTITION BY HASH (user_id) with a fixed 16 partitions (<table>_p00 ..
-- <table>_p15). Every index of today is read from the table's own definitions and
-- created again on the parent, so each partition has its own: the partial HNSW
-- indexes, the GIN indexes (fts, the memory lexemes, subjects), the trigram index on
-- facts, the btrees. One user's HNSW walk reads the graph of the users that hash with
-- them (a sixteenth), not everyone's. A unique key of a partitioned table must hold
-- the partition key, so every key leads with the user:
--   episodes          PRIMARY KEY (user_id, id)
--   messages          PRIMARY KEY (user_id, id), UNIQUE (user_id, event_id)
--   memory_items      PRIMARY KEY (user_id, id)
--   message_passages  PRIMARY KEY (user_id, message_id, idx)
-- and every foreign key between them, and from what hangs off them, carries the
-- user: (user_id, episode_id), (user_id, source_message_id), (user_id, superseded_by),
-- (user_id, message_id), (user_id, observation_id), (user_id, memory_id). The small
-- per-user tables with an id of their own (fact_reviews, people, episode_closes,
-- observation_evidence) get the user in their primary keys too. With the user in every
-- key a Citus deployment distributes each of them by user_id, co-located with users.
--
-- For an existing deployment this is a rewrite in one transaction: each table is
-- renamed, copied into its partitioned successor (ids kept, the identity sequence set
-- past them), its indexes and triggers created again, the old table dropped. Reads and
-- writes of these tables wait for it (ACCESS EXCLUSIVE from the first rename to the
-- commit): a stated pause, measured in docs/scale.md. Stop the services (or let them
-- wait) while `engram migrate` runs it. On a new database the tables are empty and it
-- takes a second.

CREATE FUNCTION pg_temp.partition_by_user(tbl text, pk text, parts int, fill int)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    old text := tbl || '_unpartitioned';
    d record;
    cols text;
    idx text[];
    trg text[];
    seq text;
    opts text := CASE WHEN fill IS NULL THEN '' ELSE format(' WITH (fillfactor = %s)', fill) END;
BEGIN
    -- what to create again on the successor: its indexes (those no constraint owns)
    -- and its triggers, read from the table itself while it still has its name
    SELECT coalesce(array_agg(pg_get_indexdef(x.indexrelid) ORDER BY x.indexrelid), '{}')
    INTO idx
    FROM pg_index x
    WHERE x.indrelid = tbl::regclass
      AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid);
    SELECT coalesce(array_agg(pg_get_triggerdef(t.oid) ORDER BY t.oid), '{}')
    INTO trg
    FROM pg_trigger t WHERE t.tgrelid = tbl::regclass AND NOT t.tgisinternal;

    EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, old);
    -- free the names (indexes and constraints live in the schema's namespace) and drop
    -- what the copy does not need; foreign keys from other tables go with their
    -- targets (each is added again below, with the user)
    FOR d IN SELECT conname FROM pg_constraint
             WHERE conrelid = old::regclass AND contype IN ('p', 'u', 'f')
    LOOP
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I CASCADE', old, d.conname);
    END LOOP;
    FOR d IN SELECT indexrelid::regclass::text AS name FROM pg_index WHERE indrelid = old::regclass
    LOOP
        EXECUTE format('DROP INDEX %s', d.name);
    END LOOP;

    EXECUTE format(
        'CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED '
        'INCLUDING IDENTITY INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY HASH (user_id)',
        tbl, old);
    FOR k IN 0 .. parts - 1 LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF %I FOR VALUES WITH (MODULUS %s, REMAINDER %s)%s',
            format('%s_p%s', tbl, lpad(k::text, 2, '0')), tbl, parts, k, opts);
    END LOOP;

    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute
    WHERE attrelid = tbl::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '';
    EXECUTE format('INSERT INTO %I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %I',
                   tbl, cols, cols, old);
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = tbl::regclass AND attname = 'id' AND attidentity <> '') THEN
        seq := pg_get_serial_sequence(tbl, 'id');
        EXECUTE format('SELECT setval(%L, coalesce((SELECT max(id) FROM %I), 0) + 1, false)',
                       seq, tbl);
    END IF;

    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (%s)', tbl, pk);
    FOREACH cols IN ARRAY idx LOOP
        EXECUTE cols;
    END LOOP;
    FOREACH cols IN ARRAY trg LOOP
        EXECUTE cols;
    END LOOP;
    EXECUTE format('DROP TABLE %I', old);
END
$$;

-- What points at the four tables goes first (each is added again below, with the user).
ALTER TABLE fact_reviews DROP CONSTRAINT IF EXISTS fact_reviews_episode_id_fkey;
ALTER TABLE observation_evidence
    DROP CONSTRAINT IF EXISTS observation_evidence_observation_id_fkey,
    DROP CONSTRAINT IF EXISTS observation_evidence_memory_id_fkey;

-- the referencing tables first, so each old table has nothing pointing at it when dropped
SELECT pg_temp.partition_by_user('message_passages', 'user_id, message_id, idx', 16, NULL);
SELECT pg_temp.partition_by_user('memory_items', 'user_id, id', 16, NULL);
SELECT pg_temp.partition_by_user('messages', 'user_id, id', 16, NULL);
SELECT pg_temp.partition_by_user('episodes', 'user_id, id', 16, 80);

-- Look-ups by id alone (the embedder's owners of a request, ingest's episode owners,
-- supersession and dedupe by memory id) found their row through the old primary key;
-- the new one leads with the user, so each partition gets an index on id: such a
-- look-up probes the 16 partitions' indexes. (On Citus it is a fan-out to every shard.)
CREATE INDEX episodes_id_idx ON episodes (id);
CREATE INDEX messages_id_idx ON messages (id);
CREATE INDEX memory_items_id_idx ON memory_items (id);

-- The same platform event never makes two turns of a user (it was unique across users).
ALTER TABLE messages ADD CONSTRAINT messages_event_id_key UNIQUE (user_id, event_id);

ALTER TABLE episodes ADD CONSTRAINT episodes_user_id_fkey
    FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE;
ALTER TABLE messages ADD CONSTRAINT messages_user_id_fkey
    FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE;
ALTER TABLE messages ADD CONSTRAINT messages_episode_id_fkey
    FOREIGN KEY (user_id, episode_id) REFERENCES episodes (user_id, id) ON DELETE CASCADE;
ALTER TABLE memory_items ADD CONSTRAINT memory_items_user_id_fkey
    FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE;
ALTER TABLE memory_items ADD CONSTRAINT memory_items_source_message_id_fkey
    FOREIGN KEY (user_id, source_message_id) REFERENCES messages (user_id, id)
    ON DELETE SET NULL (source_message_id);
ALTER TABLE memory_items ADD CONSTRAINT memory_items_episode_id_fkey
    FOREIGN KEY (user_id, episode_id) REFERENCES episodes (user_id, id)
    ON DELETE SET NULL (episode_id);
ALTER TABLE memory_items ADD CONSTRAINT memory_items_superseded_by_fkey
    FOREIGN KEY (user_id, superseded_by) REFERENCES memory_items (user_id, id)
    ON DELETE SET NULL (superseded_by);
ALTER TABLE message_passages ADD CONSTRAINT message_passages_user_id_fkey
    FOREIGN KEY (user_id) REFERENCES users (id) ON DELETE CASCADE;
ALTER TABLE message_passages ADD CONSTRAINT message_passages_message_id_fkey
    FOREIGN KEY (user_id, message_id) REFERENCES messages (user_id, id) ON DELETE CASCADE;

-- What hangs off them carries the user in its keys too.
ALTER TABLE fact_reviews DROP CONSTRAINT fact_reviews_pkey;
ALTER TABLE fact_reviews ADD PRIMARY KEY (user_id, id);
ALTER TABLE fact_reviews ADD CONSTRAINT fact_reviews_episode_id_fkey
    FOREIGN KEY (user_id, episode_id) REFERENCES episodes (user_id, id) ON DELETE CASCADE;
ALTER TABLE observation_evidence DROP CONSTRAINT observation_evidence_pkey;
ALTER TABLE observation_evidence ADD PRIMARY KEY (user_id, observation_id, memory_id);
ALTER TABLE observation_evidence ADD CONSTRAINT observation_evidence_observation_id_fkey
    FOREIGN KEY (user_id, observation_id) REFERENCES memory_items (user_id, id)
    ON DELETE CASCADE;
ALTER TABLE observation_evidence ADD CONSTRAINT observation_evidence_memory_id_fkey
    FOREIGN KEY (user_id, memory_id) REFERENCES memory_items (user_id, id) ON DELETE CASCADE;
DROP INDEX IF EXISTS observation_evidence_memory_idx;
CREATE INDEX observation_evidence_memory_idx ON observation_evidence (user_id, memory_id);
ALTER TABLE people DROP CONSTRAINT people_pkey;
ALTER TABLE people ADD PRIMARY KEY (user_id, id);
ALTER TABLE episode_closes DROP CONSTRAINT episode_closes_pkey;
ALTER TABLE episode_closes ADD PRIMARY KEY (user_id, event_id);

ANALYZE episodes;
ANALYZE messages;
ANALYZE memory_items;
ANALYZE message_passages;
