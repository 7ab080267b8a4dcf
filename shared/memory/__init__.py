"""Long-term memory use cases shared by the services (facts, people, decisions, episodes)."""
