"""``engram export`` and ``engram import`` as a person runs them: real processes, a real
database, an archive file on disk, and mem0's export as JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from services.ingest.service import store_turns
from shared.streams import Publisher
from tests.support import ROOT
from tests.test_archive import empty_database, turns_of


def engram(*args: str, database_url: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENGRAM_DATABASE_URL": database_url, "ENGRAM_REDIS_URL": redis_url}
    return subprocess.run(
        [sys.executable, "-m", "engram_cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_export_to_a_file_then_import_it_elsewhere(
    pool, redis, settings, infra, user_id, tmp_path: Path
):
    await store_turns(
        pool, Publisher(redis, settings), turns_of(user_id), stale_window=timedelta(minutes=30)
    )
    out = tmp_path / "ada.engram.zip"
    done = engram(
        "export", "--user", user_id, "-o", str(out),
        database_url=infra.database_url, redis_url=infra.redis_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.exists() and "4 messages" in done.stdout
    missing = engram(
        "export", "--user", "nobody-here", "-o", str(tmp_path / "x.zip"),
        database_url=infra.database_url, redis_url=infra.redis_url,
    )  # fmt: skip
    assert missing.returncode == 2 and "no such user" in missing.stderr
    assert not (tmp_path / "x.zip").exists()

    mem0 = tmp_path / "mem0.jsonl"
    mem0.write_text(
        json.dumps({"id": "a1", "memory": "Likes green tea", "user_id": "alex"})
        + "\n"
        + json.dumps({"id": "a2", "memory": "Lives in Oslo", "user_id": "alex"})
        + "\n"
    )
    async with empty_database(infra) as target:
        done = engram(
            "import", str(out), "--no-embed", database_url=target, redis_url=infra.redis_url
        )
        assert done.returncode == 0, done.stderr
        assert "imported" in done.stdout and f"as user {user_id}" in done.stdout
        again = engram(
            "import", str(out), "--no-embed", database_url=target, redis_url=infra.redis_url
        )
        assert again.returncode == 0 and "imported 0 row(s)" in again.stdout
        done = engram(
            "import", str(mem0), "--from", "mem0", "--no-embed",
            database_url=target, redis_url=infra.redis_url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "as user alex" in done.stdout
        assert "memory_items" in done.stdout
        bad = tmp_path / "not.zip"
        bad.write_bytes(b"hello")
        refused = engram("import", str(bad), database_url=target, redis_url=infra.redis_url)
        assert refused.returncode == 2 and "not a zip" in refused.stderr
