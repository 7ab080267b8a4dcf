-- A turn's learned memories, found from the turn (docs/retrieval.md, "What was
-- learned from a turn").
--
-- A message search scores each of its candidate turns also by the memories the
-- extractor learned from it (`memory_items.source_message_id`): the best cosine of
-- the question against them (services/query/ranking/turns.py, `learned`). This
-- index answers "the memories of this user learned from this turn" for each of
-- the ~200 candidates without reading the user's other memories. Built on every
-- partition of `memory_items` (migration 0170); only rows with a source turn.
CREATE INDEX memory_items_source_idx ON memory_items (user_id, source_message_id)
    WHERE source_message_id IS NOT NULL;
