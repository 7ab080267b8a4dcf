"""What an event refuses at parse time (shared/events.py), field by field: the checks
run on every event parsed or made, so they take a short path for plain text and skip
fields that cannot hold a producer's raw text or JSON."""

import json
import uuid

import pytest
from pydantic import ValidationError

from shared.events import (
    MAX_JSON_CHARS,
    MAX_TURN_CHARS,
    EmbedRequested,
    EmbedTarget,
    TurnReceived,
    _raw_fields,
    encode,
    turn_adapter,
)


def _turn(**fields: object) -> bytes:
    payload = {"user_id": "u1", "provider": "p", "chat_id": "c", "role": "user", "content": "hi"}
    payload.update(fields)
    return json.dumps(payload).encode()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"display_name": "Ti\u0000m"}, "display_name"),
        ({"tool_result": "x" * (MAX_JSON_CHARS + 1)}, "tool_result"),
        ({"tool_args": ["a", {"b": "\u0000"}]}, "tool_args"),
        ({"metadata": {"k\u0000": 1}}, "metadata"),
    ],
)
def test_a_value_postgresql_would_refuse_is_refused_naming_its_field(
    fields: dict[str, object], named: str
) -> None:
    with pytest.raises(ValidationError) as err:
        turn_adapter.validate_json(_turn(**fields))
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"user_id": "Zo\ud800e"}, "user_id"),  # non-ASCII text: the encode finds it
        ({"external_message_id": "\udfff"}, "external_message_id"),
        ({"metadata": {"k\ud800": 1}}, "metadata"),
    ],
)
def test_a_lone_surrogate_in_an_event_made_in_python_is_refused(
    fields: dict[str, object], named: str
) -> None:
    """JSON with a lone surrogate escape is refused by the parser already; an event
    built from Python values reaches the check."""
    payload = json.loads(_turn())
    payload.update(fields)
    with pytest.raises(ValidationError) as err:
        TurnReceived.model_validate(payload)
    assert named in str(err.value)


def test_plain_and_non_ascii_text_is_kept() -> None:
    event = turn_adapter.validate_json(_turn(content="Zoë's café — 東京", display_name="Zoë"))
    assert isinstance(event, TurnReceived)
    assert event.content == "Zoë's café — 東京"


def test_content_longer_than_the_cap_is_refused() -> None:
    with pytest.raises(ValidationError) as err:
        turn_adapter.validate_json(_turn(content="x" * (MAX_TURN_CHARS + 1)))
    assert "content" in str(err.value)


def test_a_request_for_many_rows_is_not_refused_for_its_length() -> None:
    """A list of EmbedTargets is checked by its own model, not walked and measured as
    raw JSON (which refused a request for 10,000 rows, as "targets is ... characters")."""
    targets = [EmbedTarget(kind="message", id=str(i)) for i in range(10_000)]
    assert len(json.dumps(targets, default=str)) > MAX_JSON_CHARS  # the old measure
    request = EmbedRequested(user_id=None, targets=targets, event_id=uuid.uuid4())
    assert len(request.targets) == 10_000
    assert _raw_fields(EmbedRequested) == ("user_id",)
    assert "targets" not in _raw_fields(EmbedRequested)
    assert {"content", "metadata", "tool_args", "tool_result"} <= set(_raw_fields(TurnReceived))


def test_an_event_without_trace_is_the_same_json_as_before_and_still_parses() -> None:
    """``trace`` (shared/tracing.py) is optional and written only when set: an event
    from a producer that predates it, or does not trace, reads and writes as before."""
    turn = turn_adapter.validate_json(_turn())
    assert turn.trace is None
    assert "trace" not in json.loads(encode(turn))
    traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    again = turn_adapter.validate_json(_turn(trace=traced))
    assert again.trace == traced and json.loads(encode(again))["trace"] == traced


@pytest.mark.parametrize("trace", [5, {"traceparent": "x"}, ["00-a"]])
def test_a_trace_that_is_not_text_is_dropped_not_refused(trace: object) -> None:
    assert turn_adapter.validate_json(_turn(trace=trace)).trace is None
