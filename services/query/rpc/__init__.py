"""The Redis request/reply adapter."""
