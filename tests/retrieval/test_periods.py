"""The calendar periods a query names (services/query/ranking/periods.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.query.ranking.periods import periods


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
