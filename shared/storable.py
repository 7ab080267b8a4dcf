"""What PostgreSQL can store, checked once: the one guard for text and JSON that
comes from outside (a request body, a query string, a tool call's arguments).

:func:`find_problem` walks a decoded JSON value without recursion and answers the
first part PostgreSQL would refuse, or that would break a later read, with its
path: a NUL character or a lone surrogate (in a value or a key), an integer
beyond 64 bits, a number that is not finite, and nesting deeper than
:data:`MAX_JSON_DEPTH` levels. A value stored deeper could not be answered
again (the response encoder gives up near 200-300 levels), so it is refused
when written, naming the field, instead of breaking every read of it.
"""

from __future__ import annotations

import math
from typing import Any

INT64 = 2**63 - 1
MAX_JSON_DEPTH = 64
"""The deepest a JSON value may nest (objects and arrays) to be accepted."""

Loc = tuple[str | int, ...]


def text_problem(value: str) -> str | None:
    """Why PostgreSQL cannot store ``value`` as text, or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (no lone surrogates)"
    return None


def find_problem(
    value: Any, loc: Loc, *, max_depth: int = MAX_JSON_DEPTH
) -> tuple[Loc, str] | None:
    """The first part of ``value`` that cannot be stored, with its path (``loc`` first);
    a value nested too deep is named by its first two levels under ``loc``."""
    stack: list[tuple[Any, Loc, int]] = [(value, loc, 0)]
    while stack:
        v, where, depth = stack.pop()
        if isinstance(v, str):
            problem = text_problem(v)
            if problem:
                return where, problem
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if abs(v) > INT64:
                return where, "is out of range"
        elif isinstance(v, float):
            if not math.isfinite(v):
                return where, "must be a finite number"
        elif isinstance(v, dict | list):
            if depth >= max_depth:
                return where[: len(loc) + 2], f"is nested deeper than {max_depth} levels"
            if isinstance(v, dict):
                items = list(v.items())
                for k, _ in items:
                    problem = text_problem(str(k))
                    if problem:
                        return (*where, "<key>"), problem
            else:
                items = list(enumerate(v))
            # reversed: the first item is checked first, as a reader would expect
            stack.extend((item, (*where, k), depth + 1) for k, item in reversed(items))
    return None
