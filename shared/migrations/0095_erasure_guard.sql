-- Erasure that holds against writes in flight (issue 29.1-3): every statement that
-- makes sure a user row exists (the memory writer, people, facts, checkpoints,
-- settings, keys, ingest) fires this trigger, which takes the user's erasure lock
-- shared and refuses a tombstoned id. So a write that started before the erasure
-- finishes first and is erased with the rest; one that starts later waits for the
-- erasure's commit, then sees its tombstone and is refused: it cannot bring the
-- user back. The lock is the one shared/erasure.py takes (namespace 0x0E7A5E =
-- 948830, hashtext of the id); the error's SQLSTATE EN410 is what the services
-- translate to "this user was erased" (shared/erasure.py, ERASED_SQLSTATE).
CREATE OR REPLACE FUNCTION refuse_erased_user() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(948830, hashtext(NEW.id));
    -- a statement of its own: a fresh snapshot, taken after the lock was granted
    IF EXISTS (SELECT 1 FROM erased_users
               WHERE user_hash = encode(sha256(convert_to(NEW.id, 'UTF8')), 'hex')) THEN
        RAISE EXCEPTION 'this user was erased; nothing is stored for it until re-enabled'
            USING ERRCODE = 'EN410';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER users_refuse_erased BEFORE INSERT ON users
FOR EACH ROW EXECUTE FUNCTION refuse_erased_user();
