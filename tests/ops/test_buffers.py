"""The embedded PostgreSQL's shared_buffers: sized to the data, as PostgreSQL shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_cli.embedded import database_bytes
from shared import settings as settings_module
from shared.settings import CommonSettings, shared_buffers_for

MB = 2**20


@pytest.fixture
def ram_24gb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_module, "quarter_of_ram_mb", lambda: 6026)


@pytest.mark.parametrize(
    ("database", "buffers"),
    [
        (0, "128MB"),  # a new data directory
        (12 * MB, "128MB"),
        (90 * MB, "256MB"),  # the next power of two above 1.5x
        (400 * MB, "1GB"),
        (3000 * MB, "5GB"),  # capped at a quarter of RAM, in whole GB
        (10**12, "5GB"),
    ],
)
def test_buffers_are_the_next_power_of_two_above_the_data_up_to_a_quarter_of_ram(
    ram_24gb: None, database: int, buffers: str
) -> None:
    assert shared_buffers_for(database) == buffers


def test_a_setting_overrides_the_sizing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENGRAM_EMBEDDED_PG_SHARED_BUFFERS", raising=False)
    assert CommonSettings(_env_file=None).embedded_pg_shared_buffers is None
    monkeypatch.setenv("ENGRAM_EMBEDDED_PG_SHARED_BUFFERS", "2GB")
    assert CommonSettings(_env_file=None).embedded_pg_shared_buffers == "2GB"


def test_the_database_size_is_what_the_base_directory_holds(tmp_path: Path) -> None:
    assert database_bytes(tmp_path / "postgres") == 0  # before initdb
    (tmp_path / "postgres" / "base" / "16384").mkdir(parents=True)
    (tmp_path / "postgres" / "base" / "16384" / "1259").write_bytes(b"x" * 8192)
    (tmp_path / "postgres" / "base" / "16384" / "2619").write_bytes(b"x" * 4096)
    (tmp_path / "postgres" / "pg_wal").mkdir()
    (tmp_path / "postgres" / "pg_wal" / "000000010000000000000001").write_bytes(b"x" * 9999)
    assert database_bytes(tmp_path / "postgres") == 12288
