"""Text cut to a length, the one rule for every line and snippet engram shows.

A search hit's ``content_snippet``, a line of the context block, a theme's name, a
summary's title, the browser's table cells: each is the text as it is when it fits,
else its first ``limit - 1`` characters (the white space before the cut dropped)
and "…", so a cut text never ends "word …" and never passes ``limit``.
"""

from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: itself, or cut and ended with "…"."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + ELLIPSIS


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (every run of white space one space), clipped to ``limit``."""
    return clip(" ".join(text.split()), limit)
