-- A checkpoint write keeps one index fewer (issue 32: a LangGraph checkpoint's put).
--
-- `checkpoints_parent_idx` (user_id, thread_id, parent_id), migration 0020, was for
-- walking a thread's lineage; every walk goes from a checkpoint to its parent
-- (`checkpoint_id = chain.parent_id`: the primary key), and no statement looks a
-- checkpoint up by its parent. Each put still wrote the index: ~0.04 ms of a put's
-- ~1.0 ms in PostgreSQL (docs/benchmarks.md, "Issue 32").
DROP INDEX IF EXISTS checkpoints_parent_idx;
