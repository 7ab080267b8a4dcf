"""engram's services: ingest, embedder, extractor, query. They never import each other."""
