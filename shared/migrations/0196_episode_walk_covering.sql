-- The walk of a candidate's neighbours reads the index alone (docs/retrieval.md,
-- "Long history").
--
-- A message search reads, for each of its ~200 candidates, up to 12 turns on each
-- side in the candidate's episode (services/query/ranking/turns.py, `_NEAR`):
-- their id, time, speaker (role and display name), under the search's filters
-- (user, chat, episode, time). On `messages_episode_order_idx` (episode_id,
-- occurred_at, id) every one of those ~4,000 turns was a read of the heap. Here the
-- index is the same key with those columns included, so the walk is an index-only
-- scan (a page the embedder updated since the last vacuum is still read from the
-- heap). Same name, same key: whoever ordered an episode's turns by it still does.
--
-- `messages` is hash-partitioned by user (migration 0170): the index is built on
-- every partition. Writes to messages wait while it is built. The included text
-- columns are bounded by ingest's limits (user and chat 200 characters, display
-- name 500), as the other indexes holding them (messages_external_idx).
CREATE INDEX messages_episode_walk_idx ON messages (episode_id, occurred_at, id)
    INCLUDE (user_id, chat_id, role, display_name);
DROP INDEX messages_episode_order_idx;
ALTER INDEX messages_episode_walk_idx RENAME TO messages_episode_order_idx;
