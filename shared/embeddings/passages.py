"""A long turn cut into passages, so that meaning reaches all of it.

The local model reads 256 word pieces (about 1,000 characters of English prose,
fewer of code); an assistant's answer often runs to thousands. A turn's own
vector (``messages.embedding``) is its head, as before; when its content is
longer than ``size`` characters, the rest is cut into passages of at most
``size`` characters (whitespace runs counted as one space), each starting
``overlap`` characters before the last one ended, cut at a paragraph or
sentence end when one lies in the second half of the window, else at a space,
else (one long word: a blob, a hash) anywhere. Each passage is embedded as
``<date> <speaker>: <passage>`` (the form of the turn's own text,
``store.message_text``) and stored in ``message_passages`` with its place in
the content (``start``, ``end``); a search reads a turn's best vector, its
head's or a passage's (docs/embeddings.md, "Passages").

The first window (``idx`` 0) is the head the turn's own vector already reads:
it is stored with that vector, not embedded again, so a long turn's passages
cover all of it (for its words too: each passage's are indexed, ``fts``);
``max_passages`` bounds one turn's (a 1,000,000-character log of distinct words
makes about 1,400 at the defaults).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SIZE = 800
OVERLAP = 100
MAX_PASSAGES = 2000

_WORD = re.compile(r"\S+")
# a word ending a sentence, or followed by a blank line
_END = re.compile(r"[.!?:;)\]\"'`]$")


@dataclass(frozen=True)
class Passage:
    idx: int  # 0 is the head, whose vector is the turn's own
    start: int  # character offsets in the turn's content
    end: int
    text: str  # the passage, whitespace runs as one space


def split(
    content: str, *, size: int = SIZE, overlap: int = OVERLAP, max_passages: int = MAX_PASSAGES
) -> list[Passage]:
    """The passages of ``content``, its head first; [] when it fits in one window."""
    words = _words(content, size)
    if not words:
        return []
    windows: list[tuple[int, int]] = []  # [first word, last word + 1)
    i = 0
    while i < len(words) and len(windows) < max_passages:
        j, length = i, 0
        while j < len(words) and length + (words[j][1] - words[j][0]) + (j > i) <= size:
            length += (words[j][1] - words[j][0]) + (j > i)
            j += 1
        j = max(j, i + 1)
        if j < len(words):
            j = _boundary(content, words, i, j, size)
        windows.append((i, j))
        if j >= len(words):
            break
        # the next window starts ``overlap`` characters back, never before i + 1
        back, k = 0, j
        while k - 1 > i and back + (words[k - 1][1] - words[k - 1][0]) + 1 <= overlap:
            k -= 1
            back += words[k][1] - words[k][0] + 1
        i = k
    if len(windows) < 2:
        return []
    out = []
    for n, (a, b) in enumerate(windows):
        start, end = words[a][0], words[b - 1][1]
        out.append(Passage(n, start, end, " ".join(content[s:e] for s, e in words[a:b])))
    return out


def _words(content: str, size: int) -> list[tuple[int, int]]:
    """Spans of the words of ``content``, a word longer than ``size`` cut in pieces."""
    out: list[tuple[int, int]] = []
    for m in _WORD.finditer(content):
        s, e = m.span()
        while e - s > size:
            out.append((s, s + size))
            s += size
        out.append((s, e))
    return out


def _boundary(content: str, words: list[tuple[int, int]], i: int, j: int, size: int) -> int:
    """Where to end the window of words ``[i, j)``: after the last word in its
    second half that ends a paragraph or a sentence, else at ``j``."""
    half = words[i][0] + size // 2
    for k in range(j - 1, i, -1):
        s, e = words[k]
        if s < half:
            break
        nxt = words[k + 1][0] if k + 1 < len(words) else e
        if "\n\n" in content[e:nxt] or _END.search(content[s:e]):
            return k + 1
    return j
