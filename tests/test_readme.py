"""What README.md says about the tests and the API stays true (issue 29.20)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from services.query.episodes.recall import EpisodeHit
from tests.support import ROOT

README = (ROOT / "README.md").read_text()
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8}
NUMBERS.update({"nine": 9, "ten": 10, "eleven": 11, "twelve": 12})


def _tests_in(path: str) -> int:
    return len(re.findall(r"^(?:async )?def test_", (ROOT / path).read_text(), re.M))


def test_the_readme_counts_the_browser_tests_there_are() -> None:
    said = re.search(
        r"`chromium` for the (\w+) browser tests \((\w+) in\s+`tests/browser/test_browser.py`,"
        r"\s+(\w+) in `tests/browser/test_docs.py`",
        README,
    )
    assert said, "README no longer says how many tests need chromium"
    total, browser, docs = (NUMBERS[w] for w in said.groups())
    assert browser == _tests_in("tests/browser/test_browser.py")
    assert docs == _tests_in("tests/browser/test_docs.py")
    assert total == browser + docs


def test_the_readmes_episode_search_example_has_the_fields_an_answer_has() -> None:
    example = README.split("/v1/episodes/search", 1)[1].split("\n\n", 1)[0]
    shown = set(re.findall(r'"(\w+)":', example)) - {"query", "episodes", "mode"}
    hit = EpisodeHit(
        episode_id=uuid.uuid4(),
        user_id="tim",
        display_name="Tim",
        title="t",
        summary="s",
        key_points=[],
        topics=[],
        outcome="o",
        started_at=datetime.now(UTC),
        score=1.0,
    )
    assert shown == set(hit.as_dict())
