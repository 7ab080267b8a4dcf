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
