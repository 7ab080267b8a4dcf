"""Query-time embedding: the user's embedder for a query."""
