-- Erasure that stays erased (issue 17.4): a tombstone per erased user, so turns
-- already in flight or published later are dropped instead of bringing the user
-- back. Only a hash of the id is kept: the id itself is what was erased. An
-- admin re-enables the user by deleting the tombstone (POST /v1/admin/users/{id}/reenable).
CREATE TABLE erased_users (
    user_hash text PRIMARY KEY,  -- sha256 hex of the user id (shared/erasure.py)
    erased_at timestamptz NOT NULL DEFAULT now()
);
