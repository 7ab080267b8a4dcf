"""engram extractor service."""
