"""Code shared by every engram service: events, settings, database, streams, metrics."""
