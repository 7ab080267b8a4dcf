"""engram embedder service."""
