-- People lookups (Ash's resolution table) and the live-memory index that
-- supersession, recall and context assembly read.

-- One person per name for an owner: resolution by name is then unambiguous,
-- and two concurrent first mentions cannot create twins.
CREATE UNIQUE INDEX people_user_name_key ON people (user_id, lower(name)) WHERE name IS NOT NULL;
CREATE INDEX people_user_relation_idx ON people (user_id, lower(relation))
    WHERE relation IS NOT NULL;

-- Active, not superseded memories of a user, newest first.
CREATE INDEX memory_items_live_idx ON memory_items (user_id, scope, created_at DESC)
    WHERE status = 'active' AND superseded_at IS NULL;
-- Shared (chat-scoped) memories of one chat, read by every member.
CREATE INDEX memory_items_chat_idx ON memory_items (provider, chat_id, created_at DESC)
    WHERE scope = 'chat';
