-- Thread checkpoints for graph runtimes (LangGraph): a namespace inside the
-- thread (a subgraph's checkpoints), and the pending writes of the tasks run
-- from a checkpoint. Existing checkpoints are in the root namespace ''.
ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS checkpoint_ns text NOT NULL DEFAULT '';

-- Listing one namespace of a thread newest first, and paging with a cursor.
CREATE INDEX IF NOT EXISTS checkpoints_ns_idx
    ON checkpoints (user_id, thread_id, checkpoint_ns, created_at DESC, checkpoint_id DESC);

-- A task's writes against a checkpoint: one row per (task, idx), kept until
-- the checkpoint goes (its thread deleted, pruned, or its run deleted).
CREATE TABLE IF NOT EXISTS checkpoint_writes (
    user_id       text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    thread_id     text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    checkpoint_id text NOT NULL,
    task_id       text NOT NULL,
    idx           integer NOT NULL,
    channel       text NOT NULL,
    value         jsonb NOT NULL,
    task_path     text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, thread_id, checkpoint_id, checkpoint_ns, task_id, idx)
);
