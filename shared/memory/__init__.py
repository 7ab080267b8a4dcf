"""Memory use cases shared by the query service and the extractor (people, supersession,
remember/recall). Plain async functions over asyncpg; no HTTP, no FastStream."""
