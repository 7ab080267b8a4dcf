"""One confidence scale for every memory: 0-1 (how sure engram is that it holds).

Saved facts (Navi's ``/v1/facts``), learned facts (the extractor) and remembered
memories all use it; migration 0110 moved the values saved on the old 0-100
scale. Without a stated confidence a memory's source decides it.
"""

from __future__ import annotations

SOURCE_CONFIDENCE: dict[str, float] = {
    "tool_call": 0.95,
    "auto_discovery": 0.95,
    "user_explicit": 0.90,
}
DEFAULT_CONFIDENCE = 0.70


def by_source(source: str | None) -> float:
    """The confidence a memory from ``source`` gets when none is stated."""
    return SOURCE_CONFIDENCE.get(source or "", DEFAULT_CONFIDENCE)
