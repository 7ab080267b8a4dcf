"""Language models: an OpenAI-compatible chat client, the extraction jobs, an offline extractor."""
