"""Secrets are never stored as memory: tokens, passwords, API keys, card numbers.

``find_secret`` names the first kind of secret in a text (or None);
``redact`` replaces every secret with ``[redacted]``.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})")),
    ("API key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("AWS key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}")),
    ("bearer token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{12,}")),
    (
        "password",
        re.compile(
            r"(?i)\b(?:pass(?:word|wd|code|phrase)?|pwd|pin(?:\s+code)?)\b"
            r"(?:\s+(?:for|to|of|on)\s+[\w .@'-]{1,40}?)?\s*(?:is|was|=|:)\s*[\"'`]?\S+"
        ),
    ),
    (
        "credential",
        re.compile(
            r"(?i)\b(?:api[\s_-]?key|access[\s_-]?key|access[\s_-]?token|auth[\s_-]?token|"
            r"secret(?:[\s_-]?key)?|client[\s_-]?secret|token|PAT)\b"
            r"(?:\s+(?:for|to|of|on)\s+[\w .@'-]{1,40}?)?\s*(?:is|was|=|:)\s*"
            r"[\"'`]?[A-Za-z0-9_./+=-]{8,}"
        ),
    ),
    ("social security number", re.compile(r"\b\d{3}-\d{2}-\d{4}\b")),
    (
        "random-looking string",
        re.compile(
            r"\b(?=[A-Za-z0-9_+/=-]*\d)(?=[A-Za-z0-9_+/=-]*[A-Za-z])[A-Za-z0-9_+/=-]{32,}\b"
        ),
    ),
]
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2 == 1:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _cards(text: str) -> list[re.Match[str]]:
    out = []
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group(0))
        if 13 <= len(digits) <= 19 and _luhn(digits):
            out.append(m)
    return out


def find_secret(text: str) -> str | None:
    """The kind of the first secret found in ``text``, or None when it looks clean."""
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    if _cards(text):
        return "card number"
    return None


def redact(text: str) -> str:
    """``text`` with every secret replaced by ``[redacted]``."""
    for _, pattern in _PATTERNS:
        text = pattern.sub(REDACTED, text)
    for m in reversed(_cards(text)):
        text = text[: m.start()] + REDACTED + text[m.end() :]
    return text
