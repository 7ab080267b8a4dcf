"""Nous episodes: the list, one episode, episode recall."""
