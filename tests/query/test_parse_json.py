"""The query service reads a JSON body as ``json.loads`` does (faults.parse_json): the
same values and the same errors, only faster on the common case."""

import json
import math

import pytest

from services.query.api.faults import parse_json

SAME = [
    b'{"a": 1, "a": 2}',  # the last of two equal keys
    b"[123456789012345678901234567890, -98765432109876543210987654321]",  # past 64 bits
    b"[1e400, -1e400, 5e-324, 1.7976931348623157e308, 0.1, -0.0, 1E2]",
    b'["\\u0000", "\\ud83d\\ude00", "caf\\u00e9", "\xc3\xa9"]',
    b'{"lone": "\\ud800"}',  # a lone surrogate: refused by the fast parser, read by json
    b"[" * 300 + b"]" * 300,  # deeper than the fast parser goes
    '{"utf16": "x"}'.encode("utf-16"),  # json.loads detects UTF-16 and UTF-32
    b'\xef\xbb\xbf{"bom": 1}',  # and skips a UTF-8 byte order mark
    b'  {"spaced": [true, false, null]}  ',
]


@pytest.mark.parametrize("raw", SAME, ids=range(len(SAME)))
def test_the_same_values_as_json_loads(raw: bytes) -> None:
    got, want = parse_json(raw), json.loads(raw)
    assert got == want
    assert json.dumps(got) == json.dumps(want)  # the same types: an int stays an int


def test_nan_and_infinity_as_json_loads_reads_them() -> None:
    got = parse_json(b"[NaN, Infinity, -Infinity]")
    assert math.isnan(got[0]) and got[1:] == [math.inf, -math.inf]


@pytest.mark.parametrize(
    "raw, error",
    [
        (b"[1] x", json.JSONDecodeError),
        (b'["\xff"]', UnicodeDecodeError),
        (b"[" * 100_000 + b"]" * 100_000, RecursionError),
    ],
    ids=["trailing", "not-utf8", "too-deep"],
)
def test_the_same_errors_as_json_loads(raw: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        json.loads(raw)
    with pytest.raises(error):
        parse_json(raw)
