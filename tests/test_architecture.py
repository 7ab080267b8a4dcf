"""docs/architecture.md stays true: the files it names exist, every seed behaviour
has a row naming where it lives, and the query service keeps its layout."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
ROOTS = ("services/", "shared/", "engram_cli/", "engram_client/", "tests/", "bench/")
# The behaviours docs/../shared/seeds/INDEX.md lists for each seed.
PER_SEED = {"Nova": 8, "Ash": 7, "Navi": 7, "Nous": 4, "Jarvus": 7}


def _seed_rows() -> list[list[str]]:
    text = DOC.read_text()
    section = text[text.index("## Seed behaviours") :]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0] not in ("seed", "---"):
            rows.append(cells)
    return rows


def _places(cell: str) -> list[tuple[str, list[str]]]:
    """Each `path` in a cell with the `names` in brackets after it."""
    out = []
    for m in re.finditer(r"`([^`]+)`(?:\s*\(([^)]*)\))?", cell):
        path, names = m.group(1), re.findall(r"`([^`]+)`", m.group(2) or "")
        if path.startswith(ROOTS):
            out.append((path, names))
    return out


def test_every_seed_behaviour_has_a_row():
    rows = _seed_rows()
    counts = {seed: sum(1 for r in rows if r[0] == seed) for seed in PER_SEED}
    assert counts == PER_SEED
    assert all(r[3] in ("file", "folder", "inside") for r in rows)


def test_the_seed_table_names_files_that_exist_and_hold_the_names():
    missing = []
    for seed, behaviour, where, _ in _seed_rows():
        places = _places(where)
        assert places, f"{seed} / {behaviour}: no path"
        for path, names in places:
            target = ROOT / path
            if not target.exists():
                missing.append(path)
                continue
            if names:
                body = target.read_text()
                for name in names:
                    if not re.search(rf"\b{re.escape(name)}\b", body):
                        missing.append(f"{path}: {name}")
    assert missing == []


def test_every_path_the_page_names_exists():
    text = DOC.read_text()
    named = {
        p
        for p in re.findall(r"`([^`\s]+)`", text)
        if p.startswith(ROOTS) and "NNNN" not in p  # a pattern, not a file
    }
    assert named, "the page names no paths"
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_the_query_service_top_level_holds_only_the_composition():
    top = sorted(p.name for p in (ROOT / "services" / "query").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "app.py", "settings.py"]


def test_the_query_service_stays_within_its_measured_levels():
    """The import graph docs/architecture.md measures ("The structure, measured"): at
    most 7 module levels (the ranking's two, the context's parts and the use cases
    over them, the adapters, ``app``, ``__main__``). A deeper chain is a use case or
    an adapter reaching up; the page says what cut the last ones."""
    from engram_cli.structure import measure

    s = measure("services.query")
    deepest = sorted(m for m, level in s.modules.items() if level == s.levels)
    assert s.levels <= 7, f"{s.levels} levels; deepest: {deepest}"
