-- A memory's validity interval beside the time it was written (issue 27.2;
-- docs/query.md, "Time"). created_at stays the system time the row was written;
-- valid_from is the event time: when what it says became true, the time of the
-- turn it was learned from when there is one (an imported conversation of 2023
-- learned today is valid from 2023); valid_to is when it stopped being true:
-- closed by supersession (the successor's valid_from) and by expiry (expires_at),
-- NULL while it holds. "What was true on T" reads valid_from <= T < valid_to;
-- "what is true now" stays the live rows (not superseded, not expired).
ALTER TABLE memory_items
    ADD COLUMN valid_from timestamptz,
    ADD COLUMN valid_to timestamptz;

UPDATE memory_items m
SET valid_from = coalesce(
        (SELECT s.occurred_at FROM messages s
         WHERE s.id = m.source_message_id AND s.user_id = m.user_id),
        m.created_at);

-- a superseded row closes where its successor starts (never before it began itself)
UPDATE memory_items m
SET valid_to = least(m.expires_at, greatest(m.valid_from, n.valid_from))
FROM memory_items n
WHERE n.id = m.superseded_by AND m.superseded_at IS NOT NULL;

UPDATE memory_items
SET valid_to = least(superseded_at, expires_at)  -- least() skips a NULL
WHERE valid_to IS NULL AND (superseded_at IS NOT NULL OR expires_at IS NOT NULL);

ALTER TABLE memory_items
    ALTER COLUMN valid_from SET DEFAULT now(),
    ALTER COLUMN valid_from SET NOT NULL;
