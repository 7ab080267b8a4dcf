"""Relative dates in a fact ("yesterday", "next week") resolved against a reference time.

A fact learned from a conversation of 8 May 2023 that says "went to Paris
yesterday" is stored as "went to Paris on 7 May 2023": the fact stays true
when read a year later.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "couple of": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a few": 3,
    "few": 3,
}
_PREPOSITIONS = {"since", "until", "till", "from", "before", "after", "by", "on", "as of"}
_NUM = (
    r"(\d{1,3}|a couple of|couple of|a few|few|an|a|one|two|three|four|five|six|seven"
    r"|eight|nine|ten)"
)


def fmt(d: date) -> str:
    return f"{d.day} {d.strftime('%B')} {d.year}"


def _monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


def _add_months(d: date, months: int) -> date:
    y, m = divmod(d.month - 1 + months, 12)
    return date(d.year + y, m + 1, 1)


def _count(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _NUMBERS[word]


def _shift(ref: date, n: int, unit: str) -> tuple[date, str]:
    unit = unit.lower().rstrip("s")
    if unit == "day":
        return ref + timedelta(days=n), "day"
    if unit == "week":
        return ref + timedelta(weeks=n), "day"
    if unit == "month":
        return _add_months(ref, n), "month"
    return date(ref.year + n, 1, 1), "year"


def _phrase(d: date, grain: str) -> str:
    if grain == "week":
        return f"the week of {fmt(_monday(d))}"
    if grain == "month":
        return f"{d.strftime('%B')} {d.year}"
    if grain == "year":
        return str(d.year)
    return fmt(d)


def resolve_relative_dates(text: str, ref: datetime | date) -> str:
    """Replace relative date expressions in ``text`` with absolute dates seen from ``ref``."""
    today = ref.date() if isinstance(ref, datetime) else ref
    rules: list[tuple[str, object]] = [
        (r"the day before yesterday", lambda m: (today - timedelta(days=2), "day")),
        (r"the day after tomorrow", lambda m: (today + timedelta(days=2), "day")),
        (r"yesterday", lambda m: (today - timedelta(days=1), "day")),
        (r"today|tonight|this morning|this afternoon|this evening", lambda m: (today, "day")),
        (r"tomorrow", lambda m: (today + timedelta(days=1), "day")),
        (r"last week", lambda m: (today - timedelta(weeks=1), "week")),
        (r"next week", lambda m: (today + timedelta(weeks=1), "week")),
        (r"this week", lambda m: (today, "week")),
        (r"last month", lambda m: (_add_months(today, -1), "month")),
        (r"next month", lambda m: (_add_months(today, 1), "month")),
        (r"this month", lambda m: (today, "month")),
        (r"last year", lambda m: (date(today.year - 1, 1, 1), "year")),
        (r"next year", lambda m: (date(today.year + 1, 1, 1), "year")),
        (r"this year", lambda m: (today, "year")),
        (
            _NUM + r" (days?|weeks?|months?|years?) ago",
            lambda m: _shift(today, -_count(m.group(1)), m.group(2)),
        ),
        (
            r"in " + _NUM + r" (days?|weeks?|months?|years?)",
            lambda m: _shift(today, _count(m.group(1)), m.group(2)),
        ),
        (r"(last|next|this|coming) (" + "|".join(_WEEKDAYS) + ")", _weekday(today)),
    ]
    pattern = re.compile(
        r"(?i)\b(?:("
        + "|".join(sorted(_PREPOSITIONS, key=len, reverse=True))
        + r")\s+)?("
        + "|".join(f"(?:{r})" for r, _ in rules)
        + r")\b"
    )
    compiled = [(re.compile(r"(?i)^(?:" + r + r")$"), f) for r, f in rules]

    def replace(m: re.Match[str]) -> str:
        prep, expr = m.group(1), m.group(2)
        for rx, fn in compiled:
            mm = rx.match(expr)
            if mm:
                d, grain = fn(mm)  # type: ignore[operator]
                phrase = _phrase(d, grain)
                if prep:
                    return f"{prep} {phrase}"
                return (
                    "on " if grain == "day" else "in " if grain in ("month", "year") else "during "
                ) + phrase
        return m.group(0)

    return pattern.sub(replace, text)


def _weekday(today: date) -> object:
    def resolve(m: re.Match[str]) -> tuple[date, str]:
        which, day = m.group(1).lower(), _WEEKDAYS.index(m.group(2).lower())
        delta = day - today.weekday()
        if which == "last":
            delta = delta - 7 if delta >= 0 else delta
        elif which in ("next", "coming"):
            delta = delta + 7 if delta <= 0 else delta
        return today + timedelta(days=delta), "day"

    return resolve
