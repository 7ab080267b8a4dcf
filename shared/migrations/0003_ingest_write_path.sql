-- Ingest's write path: every index on messages is paid on every turn.
-- messages_pending_idx (id) WHERE pending served no query (the embedder's reads
-- go by user: messages_user_pending_idx); drop it.
DROP INDEX IF EXISTS messages_pending_idx;
DROP INDEX IF EXISTS memory_items_pending_idx;
