"""Stores users, episodes and messages from the ``turns`` and ``episodes`` streams."""
