"""Ash's people: remember, recall."""
