"""shared.text: the one rule every cut line and snippet follows."""

from shared.text import clip, one_line


def test_a_text_that_fits_is_itself() -> None:
    assert clip("a short line", 12) == "a short line"
    assert one_line("  two\n lines\t", 20) == "two lines"


def test_a_cut_text_never_passes_its_limit_nor_ends_in_a_space() -> None:
    text = "the user asked about the weather in Lisbon " * 5
    for limit in range(2, 60):
        out = clip(text, limit)
        assert len(out) <= limit and out.endswith("…")
        assert not out[:-1].endswith(" ")
        assert text.startswith(out[:-1])
    assert clip("word another", 6) == "word…"  # not "word …"
