-- messages, memory_items and episodes hash-partitioned by user (docs/scale.md).
--
-- Each becomes PARTITION BY HASH (user_id) with 16 partitions (<table>_p00 ..
-- <table>_p15); every index of today is created on the parent, so each partition
-- has its own (HNSW, GIN, trigram, btree): one user's HNSW walk reads only the
-- graph of the sixteenth of the users that hash with them. A unique key of a
-- partitioned table must hold the partition key, so:
--   messages      PRIMARY KEY (user_id, id), UNIQUE (user_id, event_id)
--   episodes      PRIMARY KEY (user_id, id)
--   memory_items  PRIMARY KEY (user_id, id)
-- and every foreign key between them carries the user: (user_id, episode_id),
-- (user_id, source_message_id), (user_id, superseded_by). The tables that hang off
-- them carry it too: fact_reviews (user_id, id) with (user_id, episode_id),
-- people (user_id, id), episode_closes (user_id, event_id). With the user in every
-- key, a Citus deployment distributes each of them by user_id, co-located.
--
-- For an existing deployment this is a rewrite under one transaction: each table is
-- renamed, copied into its partitioned successor, its indexes and triggers are
-- created again from their own definitions, and the old table is dropped. Writes
-- and reads of the three tables wait for it (ACCESS EXCLUSIVE): a stated pause,
-- measured in docs/scale.md (about 6 minutes per million turns on 2 shared cores).
-- Stop the services (or expect them to wait) while it runs.

CREATE FUNCTION pg_temp.partition_by_user(tbl text, parts int, fill int) RETURNS void
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
    -- and its triggers, read from the table itself
    SELECT coalesce(array_agg(pg_get_indexdef(x.indexrelid) ORDER BY x.indexrelid), '{}')
    INTO idx
    FROM pg_index x
    WHERE x.indrelid = tbl::regclass
      AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid);
    SELECT coalesce(array_agg(pg_get_triggerdef(t.oid) ORDER BY t.oid), '{}')
    INTO trg
    FROM pg_trigger t WHERE t.tgrelid = tbl::regclass AND NOT t.tgisinternal;

    EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, old);
    -- free the names (indexes live in the schema's namespace) and drop what the
    -- copy does not need; foreign keys from other tables go with their targets
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
    seq := pg_get_serial_sequence(tbl, 'id');
    IF seq IS NOT NULL THEN
        EXECUTE format('SELECT setval(%L, coalesce((SELECT max(id) FROM %I), 0) + 1, false)',
                       seq, tbl);
    END IF;

    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (user_id, id)', tbl);
    FOREACH cols IN ARRAY idx LOOP
        EXECUTE cols;
    END LOOP;
    FOREACH cols IN ARRAY trg LOOP
        EXECUTE cols;
    END LOOP;
END
$$;

SELECT pg_temp.partition_by_user('episodes', 16, 80);
SELECT pg_temp.partition_by_user('messages', 16, NULL);
SELECT pg_temp.partition_by_user('memory_items', 16, NULL);

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

-- What hangs off them carries the user in its keys too.
ALTER TABLE fact_reviews DROP CONSTRAINT IF EXISTS fact_reviews_episode_id_fkey;
ALTER TABLE fact_reviews DROP CONSTRAINT fact_reviews_pkey;
ALTER TABLE fact_reviews ADD PRIMARY KEY (user_id, id);
ALTER TABLE fact_reviews ADD CONSTRAINT fact_reviews_episode_id_fkey
    FOREIGN KEY (user_id, episode_id) REFERENCES episodes (user_id, id) ON DELETE CASCADE;
ALTER TABLE people DROP CONSTRAINT people_pkey;
ALTER TABLE people ADD PRIMARY KEY (user_id, id);
ALTER TABLE episode_closes DROP CONSTRAINT episode_closes_pkey;
ALTER TABLE episode_closes ADD PRIMARY KEY (user_id, event_id);

DROP TABLE memory_items_unpartitioned, messages_unpartitioned, episodes_unpartitioned;

ANALYZE episodes;
ANALYZE messages;
ANALYZE memory_items;
