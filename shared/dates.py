"""Dates in text, the one parser: the periods a query names, relative dates resolved.

What callers may rely on:

- one bound: every date this module returns, and every time engram stores (a
  turn's ``occurred_at``, shared/events.py), lies in ``[EARLIEST, LATEST)``; a
  date outside it ("9999-12-31", "December 9999", "in 900 years") is read as no
  date at all, never an error, so no arithmetic on it can overflow;
- :func:`periods` returns ``[start, end)`` spans in UTC, the most specific reading
  of each part of the text (a full date is one day, a month with its year is that
  month, a four-digit year 19xx/20xx is that year). Given ``ref`` (the
  conversation's own "now": its latest turn, not the wall clock), relative
  phrases are read too: "yesterday", "last week", "three months ago", "last
  Friday", and "the week / day / month before / after" a date; a month without a
  year or a bare weekday is not read;
- :func:`resolve_relative_dates` rewrites the same relative phrases as absolute
  dates seen from ``ref`` ("went to Paris yesterday" said on 8 May 2023 -> "went
  to Paris on 7 May 2023"): the extractor stores facts that stay true when read
  a year later;
- :func:`asks_order` says whether a question asks for an order or a duration
  ("what did I do first", "how long between", "in what order"): the context then
  lists its dated evidence in time order (docs/retrieval.md);
- :func:`asks_across` says whether a question gathers over the history (an order
  or duration, a count, a summary, "across my sessions"): the context then cuts
  each past turn's line shorter, so more of the turns it rests on fit
  (docs/context.md).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator

Period = tuple[datetime, datetime]

EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def within(t: datetime) -> bool:
    """Whether ``t`` (naive: UTC) lies in the one bound ``[EARLIEST, LATEST)``."""
    t = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    return EARLIEST <= t < LATEST


def bounded(t: datetime) -> datetime:
    """``t`` in UTC (naive: read as UTC) if it lies in the bound; else ValueError naming
    the bound (an API field so typed answers 422 naming the field, never 500)."""
    t = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    if not within(t):
        raise ValueError(f"must lie in {EARLIEST.year}-{LATEST.year - 1}")
    return t


def _at(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTHS["sept"] = 9
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"

# Most specific first: a span already read is not read again by a later pattern.
_ABSOLUTE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("month day year", re.compile(rf"\b({_MONTH})\.?\s+{_DAY},?\s+(\d{{4}})\b", re.I)),
    ("day month year", re.compile(rf"\b{_DAY}\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)),
    ("iso", re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    ("month year", re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I)),
    ("year", re.compile(r"\b((?:19|20)\d{2})\b")),
)


def _absolute(kind: str, m: re.Match[str]) -> tuple[date, str]:
    """The date a pattern read and its grain (``day``, ``month``, ``year``)."""
    if kind == "month day year":
        return date(int(m[3]), _MONTHS[m[1].lower()], int(m[2])), "day"
    if kind == "day month year":
        return date(int(m[3]), _MONTHS[m[2].lower()], int(m[1])), "day"
    if kind == "iso":
        return date(int(m[1]), int(m[2]), int(m[3])), "day"
    if kind == "month year":
        return date(int(m[2]), _MONTHS[m[1].lower()], 1), "month"
    return date(int(m[1]), 1, 1), "year"


def _span(d: date, grain: str) -> Period | None:
    """The ``[start, end)`` of the ``grain`` holding ``d``; None outside the bound."""
    try:
        if grain == "day":
            start, end = d, d + timedelta(days=1)
        elif grain == "week":
            start = d - timedelta(days=d.weekday())
            end = start + timedelta(days=7)
        elif grain == "month":
            start, end = date(d.year, d.month, 1), _add_months(d, 1)
        else:
            start, end = date(d.year, 1, 1), date(d.year + 1, 1, 1)
    except (ValueError, OverflowError):
        return None
    lo, hi = _at(start), _at(end)
    return (lo, hi) if EARLIEST <= lo and hi <= LATEST else None


# ---- relative phrases, seen from a reference day -------------------------------------

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


def _weekday(m: re.Match[str], today: date) -> tuple[date, str]:
    which, day = m.group(1).lower(), _WEEKDAYS.index(m.group(2).lower())
    delta = day - today.weekday()
    if which == "last":
        delta = delta - 7 if delta >= 0 else delta
    elif which in ("next", "coming"):
        delta = delta + 7 if delta <= 0 else delta
    return today + timedelta(days=delta), "day"


Rule = Callable[[re.Match[str], date], tuple[date, str]]

_RULES: list[tuple[str, Rule]] = [
    (r"the day before yesterday", lambda m, t: (t - timedelta(days=2), "day")),
    (r"the day after tomorrow", lambda m, t: (t + timedelta(days=2), "day")),
    (r"yesterday", lambda m, t: (t - timedelta(days=1), "day")),
    (r"today|tonight|this morning|this afternoon|this evening", lambda m, t: (t, "day")),
    (r"tomorrow", lambda m, t: (t + timedelta(days=1), "day")),
    (r"last week", lambda m, t: (t - timedelta(weeks=1), "week")),
    (r"next week", lambda m, t: (t + timedelta(weeks=1), "week")),
    (r"this week", lambda m, t: (t, "week")),
    (r"last month", lambda m, t: (_add_months(t, -1), "month")),
    (r"next month", lambda m, t: (_add_months(t, 1), "month")),
    (r"this month", lambda m, t: (t, "month")),
    (r"last year", lambda m, t: (date(t.year - 1, 1, 1), "year")),
    (r"next year", lambda m, t: (date(t.year + 1, 1, 1), "year")),
    (r"this year", lambda m, t: (t, "year")),
    (
        _NUM + r" (days?|weeks?|months?|years?) ago",
        lambda m, t: _shift(t, -_count(m.group(1)), m.group(2)),
    ),
    (
        r"in " + _NUM + r" (days?|weeks?|months?|years?)",
        lambda m, t: _shift(t, _count(m.group(1)), m.group(2)),
    ),
    (r"(last|next|this|coming) (" + "|".join(_WEEKDAYS) + ")", _weekday),
]
_RELATIVE = re.compile(
    r"(?i)\b(?:("
    + "|".join(sorted(_PREPOSITIONS, key=len, reverse=True))
    + r")\s+)?("
    + "|".join(f"(?:{r})" for r, _ in _RULES)
    + r")\b"
)
_EACH = [(re.compile(r"(?i)^(?:" + r + r")$"), f) for r, f in _RULES]


def _relative(expr: str, today: date) -> tuple[date, str] | None:
    """The day and grain a relative phrase names seen from ``today``; None if it names
    none or lands outside the bound."""
    for rx, rule in _EACH:
        m = rx.match(expr)
        if m:
            try:
                d, grain = rule(m, today)
            except (ValueError, OverflowError):
                return None
            return (d, grain) if _span(d, grain) is not None else None
    return None


def _phrase(d: date, grain: str) -> str:
    if grain == "week":
        return f"the week of {fmt(d - timedelta(days=d.weekday()))}"
    if grain == "month":
        return f"{d.strftime('%B')} {d.year}"
    if grain == "year":
        return str(d.year)
    return fmt(d)


def resolve_relative_dates(text: str, ref: datetime | date) -> str:
    """Replace relative date expressions in ``text`` with absolute dates seen from ``ref``
    (one outside the bound is left as written)."""
    today = ref.date() if isinstance(ref, datetime) else ref

    def replace(m: re.Match[str]) -> str:
        prep, expr = m.group(1), m.group(2)
        found = _relative(expr, today)
        if found is None:
            return m.group(0)
        d, grain = found
        phrase = _phrase(d, grain)
        if prep:
            return f"{prep} {phrase}"
        return (
            "on " if grain == "day" else "in " if grain in ("month", "year") else "during "
        ) + phrase

    return _RELATIVE.sub(replace, text)


# ---- the periods a query names ---------------------------------------------------------

_AROUND = re.compile(r"(?i)\bthe (day|week|month) (before|after)\s*$")
_UNITS = {"day": timedelta(days=1), "week": timedelta(days=7)}


def _around(prefix: str, span: Period) -> Period | None:
    """ "the week before <span>": the week that ends where the span starts, and the
    span itself (after: the span and the week that starts where it ends): what
    happened the week before X is often told on X ("last week I ..."). None when the
    text before the span says no such thing or the result leaves the bound."""
    m = _AROUND.search(prefix)
    if m is None:
        return None
    unit, side = m.group(1).lower(), m.group(2).lower()
    lo, hi = span
    try:
        if unit == "month":
            step = _add_months(lo.date(), -1) if side == "before" else hi.date()
            out = _span(step, "month")
            if out is None:
                return None
            return (out[0], hi) if side == "before" else (lo, out[1])
        width = _UNITS[unit]
        out = (lo - width, hi) if side == "before" else (lo, hi + width)
    except (ValueError, OverflowError):
        return None
    return out if EARLIEST <= out[0] and out[1] <= LATEST else None


_EVENT = re.compile(
    r"(?i)\bthe (day|week|month) (before|after) (?:the |my |our |his |her |their )?"
    r"([a-z][\w'-]*(?: [a-z][\w'-]*){0,3}?)(?=[?.!,;]|\s+(?:and|or|when|while|did|was|were|"
    r"is|i|we|you|he|she|they)\b|$)"
)


def event_anchors(text: str) -> list[tuple[str, str, str, str]]:
    """ "the week before the launch": ``(unit, side, "launch", phrase)`` for each such
    phrase whose anchor is an event, not a date (a date is read by :func:`periods`).
    The caller finds when the event happened and calls :func:`around_event`; the
    phrase says when, not what, so a search may leave its words out."""
    out = []
    for m in _EVENT.finditer(text):
        if not periods(m.group(0)) and not relative(m.group(3)):
            out.append((m.group(1).lower(), m.group(2).lower(), m.group(3), m.group(0)))
    return out


def around_event(unit: str, side: str, at: datetime) -> Period | None:
    """The ``unit`` before / after the day of ``at`` (an event's time); None outside
    the bound."""
    if not within(at):
        return None
    day = _span(at.date(), "day")
    return None if day is None else _around(f"the {unit} {side}", day)


def relative(text: str) -> bool:
    """Whether ``text`` holds a relative phrase :func:`periods` reads given a ``ref``."""
    return _RELATIVE.search(text) is not None


_PART_OF = re.compile(r"(?i)\s+of\b")  # "the last week of August": part of a named period


def periods(text: str, ref: datetime | None = None) -> list[Period]:
    """The ``[start, end)`` spans ``text`` names: absolute ones in the order of the
    patterns, then (given ``ref``) the relative ones in the order written."""
    found: list[tuple[int, int, Period]] = []
    taken: list[tuple[int, int]] = []

    def free(a: int, b: int) -> bool:
        return not any(x < b and a < y for x, y in taken)

    for kind, pattern in _ABSOLUTE:
        for m in pattern.finditer(text):
            if not free(m.start(), m.end()):
                continue
            try:
                span = _span(*_absolute(kind, m))
            except (ValueError, OverflowError):  # "February 30, 2023", "2023-13-01"
                continue
            if span is None:
                continue
            taken.append((m.start(), m.end()))
            found.append((m.start(), m.end(), span))
    days = [s for _, _, s in found if s[1] - s[0] == timedelta(days=1)]
    if days:  # "last week, as mentioned on 6 November": seen from the day named
        ref = days[0][0]
    if ref is not None and within(ref):
        today = ref.date()
        for m in _RELATIVE.finditer(text):
            a, b = m.start(2), m.end(2)
            if not free(a, b) or _PART_OF.match(text, b):
                continue
            rel = _relative(m.group(2), today)
            if rel is None:
                continue
            span = _span(*rel)
            if span is not None:
                taken.append((a, b))
                found.append((a, b, span))
    out: list[Period] = []
    for a, _, span in found:
        near = _around(text[max(0, a - 40) : a], span)
        out.append(near if near is not None else span)
    return out


_ORDER = re.compile(
    r"(?i)\b(?:how long (?:between|after|before|did|was|has|had|since|ago)|how many "
    r"(?:days|weeks|months|years) (?:between|after|before|since|passed|did|ago)|in what order|"
    r"which (?:came|happened|did \w+) first|what did (?:i|you|we|he|she|they) \w+ first|"
    r"first or|(?:before|after) or (?:before|after)|order of|chronological|earliest|"
    r"most recent(?:ly)?|the first time|the last time|timeline|sequence)\b"
)


def asks_order(text: str) -> bool:
    """Whether a question asks for an order or a duration between dated events."""
    return _ORDER.search(text) is not None


_ACROSS = re.compile(
    r"(?i)\b(?:across|throughout|over (?:the|our|my|all|these|those) (?:\w+ )?"
    r"(?:sessions|conversations|chats|discussions|months|weeks|time)|how many|how often|"
    r"summar(?:y|ise|ize)|every time|each time|all (?:the|of the|my)|list (?:all|the|every)|"
    r"in (?:what|which) order|order in which|progress(?:ed)?|evolv(?:e|ed)|changed over)\b"
)


def asks_across(text: str) -> bool:
    """Whether a question gathers what was said over several conversations: an
    order, a count, a summary, every time something came up (its evidence is spread
    over sessions, not one turn)."""
    return asks_order(text) or _ACROSS.search(text) is not None


AsOf = Annotated[datetime, AfterValidator(bounded)]
"""A point in time the answer is read at (``as_of``), within the one date bound."""
AS_OF_TEXT = (
    "read as of this time: memories valid then (superseded or expired since, or not), "
    "turns up to it, relative dates in the question seen from it; omitted = now"
)
