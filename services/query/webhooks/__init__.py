"""Webhooks (issue 33.1): subscriptions to a user's (or, for an admin, every user's)
memory events, delivered at least once from a transactional outbox.

- ``shared/migrations/0130_webhooks.sql``: the tables and the triggers that write an
  event and its deliveries in the transaction of the change (whoever writes the row).
- :mod:`.subscriptions`: create, list, delete, deliveries, replay (the API's use cases).
- :mod:`.sender`: the background sender: due deliveries claimed with a lease, signed,
  sent through the one outbound guard, retried with exponential backoff, then dead.

The contract (payloads, signature, retries) is docs/webhooks.md.
"""
