"""engram query service."""
