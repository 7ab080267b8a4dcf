"""Long-term memory use cases shared by the services (facts, people, supersession,
remember/recall, decisions, episodes). Plain async functions over asyncpg; no HTTP,
no FastStream."""
