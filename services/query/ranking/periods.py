"""The calendar periods a search query names: "on May 3, 2023", "in June 2023", "in 2022".

What callers may rely on: :func:`periods` returns ``[start, end)`` spans in UTC,
the most specific reading of each part of the text (a full date is one day, a
month with its year is that month, a four-digit year 19xx/20xx is that year);
text that names no such period gives ``[]``. A month without a year, weekdays and
relative phrases ("last week") are not read: they need a reference time the query
does not carry. Message search lifts turns inside these spans (docs/retrieval.md).
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

Period = tuple[datetime, datetime]

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTHS["sept"] = 9
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"

# Most specific first: a span already read is not read again by a later pattern.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("month day year", re.compile(rf"\b({_MONTH})\.?\s+{_DAY},?\s+(\d{{4}})\b", re.I)),
    ("day month year", re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)),
    ("iso", re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    ("month year", re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I)),
    ("year", re.compile(r"\b((?:19|20)\d{2})\b")),
)


def _span(kind: str, m: re.Match[str]) -> Period:
    if kind == "month day year":
        day = datetime(int(m[3]), _MONTHS[m[1].lower()], int(m[2]), tzinfo=UTC)
        return day, day + timedelta(days=1)
    if kind == "day month year":
        day = datetime(int(m[3]), _MONTHS[m[2].lower()], int(m[1]), tzinfo=UTC)
        return day, day + timedelta(days=1)
    if kind == "iso":
        day = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
        return day, day + timedelta(days=1)
    if kind == "month year":
        year, month = int(m[2]), _MONTHS[m[1].lower()]
        start = datetime(year, month, 1, tzinfo=UTC)
        return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    year = int(m[1])
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def periods(text: str) -> list[Period]:
    """The ``[start, end)`` spans ``text`` names, in the order of the patterns."""
    out: list[Period] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in taken):
                continue
            try:
                span = _span(kind, m)
            except ValueError:  # "February 30, 2023", "2023-13-01": not a date
                continue
            taken.append((m.start(), m.end()))
            out.append(span)
    return out
