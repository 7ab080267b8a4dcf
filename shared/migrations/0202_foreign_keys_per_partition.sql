-- The foreign keys between two tables partitioned by user are declared partition to
-- partition (issue 30: ingest on the partitioned layout; docs/scale.md, "Ingest").
--
-- A foreign key to a partitioned table is checked row by row through a plan over
-- the whole partitioned table: ~50 us a turn for `messages (user_id, episode_id)
-- -> episodes (user_id, id)` against ~4 us to a plain table, which made ingest
-- 1.4-2.7x slower on the partitioned layout at 100k turns and more. Both tables are
-- hashed by the same key into the same 16 partitions (migration 0170), so a user's
-- turns and episodes are always in partitions of the same remainder: the key from
-- `messages_p03` to `episodes_p03` holds exactly what the key between the parents
-- held (the user is in both sides of it), and is checked against one plain table.
-- The same for every such key: a memory's source turn, its episode, what
-- superseded it, a passage's turn. Each keeps its name and its ON DELETE action.
--
-- A key is moved only when every partition of the referencing table has one of the
-- referenced table with the same bounds (else it stays on the parents). On a database
-- without migration 0170 (tables not partitioned) this does nothing. A future
-- migration that changes the partitions declares these keys on the new ones.
DO $$
DECLARE
    f record;
    p record;
    def text;
    pairs int;
    parts int;
BEGIN
    FOR f IN
        SELECT c.oid, c.conname, c.conrelid, c.confrelid
        FROM pg_constraint c
        JOIN pg_class ch ON ch.oid = c.conrelid AND ch.relkind = 'p'
        JOIN pg_class pa ON pa.oid = c.confrelid AND pa.relkind = 'p'
        WHERE c.contype = 'f' AND c.conparentid = 0
        ORDER BY c.conrelid::regclass::text, c.conname
    LOOP
        SELECT count(*) INTO parts FROM pg_inherits WHERE inhparent = f.conrelid;
        SELECT count(*) INTO pairs
        FROM pg_inherits a
        JOIN pg_class ac ON ac.oid = a.inhrelid
        JOIN pg_inherits b ON b.inhparent = f.confrelid
        JOIN pg_class bc ON bc.oid = b.inhrelid
        WHERE a.inhparent = f.conrelid
          AND pg_get_expr(ac.relpartbound, ac.oid) = pg_get_expr(bc.relpartbound, bc.oid);
        CONTINUE WHEN parts = 0 OR pairs <> parts;
        def := pg_get_constraintdef(f.oid);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', f.conrelid::regclass, f.conname);
        FOR p IN
            SELECT ac.oid AS child, bc.oid AS parent
            FROM pg_inherits a
            JOIN pg_class ac ON ac.oid = a.inhrelid
            JOIN pg_inherits b ON b.inhparent = f.confrelid
            JOIN pg_class bc ON bc.oid = b.inhrelid
            WHERE a.inhparent = f.conrelid
              AND pg_get_expr(ac.relpartbound, ac.oid) = pg_get_expr(bc.relpartbound, bc.oid)
            ORDER BY ac.relname
        LOOP
            EXECUTE format(
                'ALTER TABLE %s ADD CONSTRAINT %I %s',
                p.child::regclass, f.conname,
                regexp_replace(def, 'REFERENCES [^(]+\(',
                               'REFERENCES ' || p.parent::regclass::text || '('));
        END LOOP;
    END LOOP;
END
$$;
