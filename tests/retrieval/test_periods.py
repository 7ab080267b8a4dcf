"""The calendar periods a query names (shared/dates.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.dates import periods


def d(y: int, m: int, day: int = 1) -> datetime:
    return datetime(y, m, day, tzinfo=UTC)


def test_a_full_date_is_one_day_in_any_common_order():
    for text in (
        "what did we do on May 3, 2023?",
        "on 3 May 2023",
        "on the 3rd of May, 2023",
        "2023-05-03",
        "May 3rd 2023",
    ):
        assert periods(text) == [(d(2023, 5, 3), d(2023, 5, 4))], text


def test_a_month_with_its_year_is_the_month_and_a_year_alone_the_year():
    assert periods("where did I travel in December 2023") == [(d(2023, 12), d(2024, 1))]
    assert periods("in Sept 2022") == [(d(2022, 9), d(2022, 10))]
    assert periods("books I read in 2021") == [(d(2021, 1), d(2022, 1))]
    assert periods("in May 2023 and in 2021") == [
        (d(2023, 5), d(2023, 6)),
        (d(2021, 1), d(2022, 1)),
    ]


def test_no_period_without_a_year_or_in_numbers_that_are_not_dates():
    for text in (
        "when did I go camping in June?",
        "what happened last week",
        "my pin is 48213",
        "room 101",
        "the 1500 metre race",
    ):
        assert periods(text) == [], text
    # an impossible day falls back to the month it names
    assert periods("on 31 February 2023") == [(d(2023, 2), d(2023, 3))]


def test_a_date_outside_the_one_bound_is_no_date_and_never_an_error():
    """Issue 29.4: no arithmetic on a parsed date can overflow."""
    ref = d(2199, 12, 31)
    for text in (
        "9999-12-31",
        "on December 31, 9999",
        "31 December 9999",
        "December 9999",
        "0000-01-01",
        "0001-01-01",
        "the week before 9999-12-31",
        "in 999 years",
        "999 years ago",
        "tomorrow",
        "next year",
    ):
        assert periods(text, ref) == [], text
    assert periods("yesterday", d(1900, 1, 1)) == []
    assert periods("yesterday", datetime(9999, 12, 31, tzinfo=UTC)) == []


def test_relative_phrases_are_read_against_the_conversations_own_now():
    ref = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday
    assert periods("what did I do last week?", ref) == [(d(2023, 5, 1), d(2023, 5, 8))]
    assert periods("yesterday", ref) == [(d(2023, 5, 7), d(2023, 5, 8))]
    assert periods("three months ago", ref) == [(d(2023, 2), d(2023, 3))]
    assert periods("what happened last week") == []  # no reference, no reading


def test_the_week_before_a_date_is_the_seven_days_before_it_and_the_day_itself():
    """What happened the week before X is often told on X ("last week I ...")."""
    assert periods("what did I do the week before May 8, 2023?") == [(d(2023, 5, 1), d(2023, 5, 9))]
    assert periods("the day after 2023-05-08") == [(d(2023, 5, 8), d(2023, 5, 10))]
    assert periods("the month before June 2023") == [(d(2023, 5, 1), d(2023, 7, 1))]


def test_a_relative_phrase_is_read_from_the_day_the_question_names_and_not_inside_a_period():
    ref = d(2024, 1, 1)
    assert periods("the last week of October 2023", ref) == [(d(2023, 10), d(2023, 11))]
    assert periods("what happened last week, as mentioned on November 6, 2023?", ref) == [
        (d(2023, 11, 6), d(2023, 11, 7)),
        (d(2023, 10, 30), d(2023, 11, 6)),
    ]
