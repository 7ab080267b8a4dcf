"""``engram publish`` on real Redis: skipped lines fail the run and reach the
dead-letter list with their reason; a missing file is a clear error; --strict."""

from __future__ import annotations

import argparse
import io
import json

from engram_cli.publish import publish_stream, run
from tests.ingest.helpers import dead_entries

GOOD = {"user_id": "u1", "provider": "cli", "chat_id": "c1", "role": "user", "content": "hi"}


def _lines(*objs: object) -> io.StringIO:
    return io.StringIO("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n")


async def test_skipped_lines_exit_1_and_are_dead_lettered_with_their_reason(
    settings, redis, capsys
):
    source = _lines(
        GOOD,
        "{not json",
        {**GOOD, "role": "robot"},
        {**GOOD, "metadata": {"k": "a\u0000b"}},
        {**GOOD, "content": "second"},
    )
    assert await publish_stream(settings, source, strict=False) == 1
    assert await redis.xlen(settings.stream("turns")) == 2
    dead = await dead_entries(redis, settings)
    assert [d["entry_id"] for d in dead] == ["line 2", "line 3", "line 4"]
    assert "not JSON" in dead[0]["error"]
    assert "role" in dead[1]["error"]
    assert "NUL" in dead[2]["error"]
    assert dead[0]["payload"] == "{not json"
    assert "3 line(s) skipped" in capsys.readouterr().out


async def test_allow_skipped_exits_0(settings, redis):
    source = _lines(GOOD, "{not json")
    assert await publish_stream(settings, source, strict=False, allow_skipped=True) == 0
    assert len(await dead_entries(redis, settings)) == 1


async def test_strict_refuses_unknown_fields_and_publishes_nothing(settings, redis, capsys):
    source = _lines(GOOD, {**GOOD, "mood": "happy"})
    assert await publish_stream(settings, source, strict=True) == 1
    assert not await redis.exists(settings.stream("turns"))
    assert "unknown field(s): mood" in capsys.readouterr().err
    # without --strict the unknown field is accepted (consumers ignore it)
    assert await publish_stream(settings, _lines({**GOOD, "mood": "happy"}), strict=False) == 0


def test_a_missing_file_is_a_one_line_error(tmp_path, capsys):
    args = argparse.Namespace(file=str(tmp_path / "nope.jsonl"), strict=False, allow_skipped=False)
    assert run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("engram publish: cannot read") and "No such file" in err
    assert "Traceback" not in err


async def test_engram_dead_previews_each_entry_and_replays_only_what_it_can(
    settings, redis, capsys
):
    """Issue 29.16: a huge entry prints as a bounded preview that says it was cut (the
    publish-time cut at 100,000 is named in the reason); ``--replay`` puts an entry read
    from a stream back on it and says truthfully that a skipped line cannot be."""
    from engram_cli.inspect import PREVIEW_CHARS, show_dead
    from shared.streams import EVENT_FIELD, dead_letter

    huge = json.dumps({**GOOD, "role": "robot", "content": "x" * 150_000})
    assert await publish_stream(settings, _lines(huge), strict=False) == 1
    good = json.dumps(GOOD).encode()
    await dead_letter(
        redis,
        settings,
        stream=settings.stream("turns"),
        group="ingest",
        entry_id="1-1",
        fields={EVENT_FIELD: good},
        error="refused 3 times",
        attempts=3,
    )
    capsys.readouterr()
    await show_dead(settings, 10, replay=True)
    out = capsys.readouterr().out.splitlines()
    skipped, stored = json.loads(out[0]), json.loads(out[1])
    assert len(out[0]) < PREVIEW_CHARS + 1_000
    assert skipped["note"] == f"payload cut at {PREVIEW_CHARS} of 100,000 characters"
    assert "(cut at 100,000 of 150," in skipped["error"]
    assert skipped["replay"].startswith("not replayed: a line engram publish skipped")
    assert "replay" not in stored and stored["payload"] == good.decode()
    assert (
        out[-1] == "2 dead-lettered entries; 1 replayed, 1 not replayable (left in dead, "
        "see 'replay' above)"
    )
    dead = await dead_entries(redis, settings)
    assert [d["entry_id"] for d in dead] == ["line 1"]  # the skipped line stays
    turns = await redis.xrange(settings.stream("turns"))
    assert turns[-1][1][EVENT_FIELD] == good  # the other is back on its stream
