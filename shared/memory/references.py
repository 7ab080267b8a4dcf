"""Reading a reference to a person ("my wife", "Sarah", "my wife Sarah").

Pure functions, no database: :func:`parse_reference` splits a reference into a
name and a relation as Ash's resolution table says, and :func:`name_from_hint` /
:func:`relation_from_hint` pick the missing half out of the fact being stored
("my wife's name is Sarah" → Sarah; "Sarah is my wife" → wife).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words that name a relation when used bare ("wife") or in a hint ("Sarah is my wife").
# After "my " anything is a relation; this list only guards the bare and hint cases.
RELATIONS = frozenset(
    """
    wife husband partner spouse girlfriend boyfriend fiance fiancee fiancé fiancée ex
    mother mom mum mommy mother-in-law father dad daddy father-in-law parents parent
    son daughter child kid kids baby stepson stepdaughter stepmother stepfather
    brother sister sibling brother-in-law sister-in-law twin
    grandmother grandma granny grandfather grandpa grandson granddaughter
    aunt uncle cousin niece nephew godfather godmother godson goddaughter
    friend bestie buddy roommate flatmate housemate neighbor neighbour
    boss manager supervisor colleague coworker co-worker teammate employee report
    assistant intern mentor mentee client customer landlord tenant
    doctor dentist therapist physio vet lawyer accountant trainer coach teacher tutor
    student pastor nanny babysitter dog cat pet
    """.split()
)
MODIFIERS = frozenset(
    "best old older oldest young younger youngest little big new former late "
    "step half dear close favourite favorite".split()
)

_SPACES = re.compile(r"\s+")
_POSSESSIVE = re.compile(r"(?:'s|’s|')$")
_NAME = r"[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?"
_NOT_NAMES = frozenset({"I", "I'm", "She", "He", "They", "We", "The", "A", "An", "It", "My"})


@dataclass(frozen=True)
class PersonRef:
    """What a reference says: a name, a relation, or both; ``text`` is the cleaned reference."""

    text: str
    name: str | None
    relation: str | None


def clean(text: str) -> str:
    return _SPACES.sub(" ", text).strip().strip('.,;:!?"“”()[]')


def _is_relation_phrase(words: list[str]) -> bool:
    """ "wife", "best friend", "older brother" — modifiers then a known relation word."""
    if not words:
        return False
    *mods, last = (w.lower() for w in words)
    return last in RELATIONS and all(m in MODIFIERS for m in mods)


def _as_name(text: str) -> str:
    return text[0].upper() + text[1:] if text.islower() else text


def parse_reference(reference: str) -> PersonRef:
    """Split a reference the way Ash's table does.

    "my wife" → relation "wife"; "Sarah" → name "Sarah"; "my wife Sarah" and
    "Sarah, my wife" → both; "wife" (a known relation word) → relation.
    """
    text = clean(_POSSESSIVE.sub("", clean(reference)))
    if not text:
        return PersonRef(text="", name=None, relation=None)
    lower = text.lower()
    if lower.startswith("my "):
        return _after_my(text, text[3:].strip())
    m = re.match(r"^(?P<name>.+?),?\s+(?:is\s+)?my\s+(?P<rel>.+)$", text)
    if m and not m.group("name").lower().startswith("my "):
        rel = _after_my(text, m.group("rel"))
        if rel.name is None:
            return PersonRef(
                text=text, name=_as_name(clean(m.group("name"))), relation=rel.relation
            )
    if _is_relation_phrase(lower.split()):
        return PersonRef(text=text, name=None, relation=lower)
    return PersonRef(text=text, name=_as_name(text), relation=None)


def _after_my(text: str, rest: str) -> PersonRef:
    """ "wife" / "wife Sarah" / "best friend Tom" / "wife sarah" after a leading "my"."""
    words = _POSSESSIVE.sub("", rest).split()
    if not words:
        return PersonRef(text=text, name=None, relation=None)
    # Lowercase words are the relation, the first capitalised word starts the name.
    for i, w in enumerate(words):
        if i > 0 and w[:1].isupper():
            return PersonRef(
                text=text, name=" ".join(words[i:]), relation=" ".join(words[:i]).lower()
            )
    # All lowercase: "wife sarah" — the longest known relation prefix, the rest a name.
    for i in range(len(words) - 1, 0, -1):
        if _is_relation_phrase(words[:i]):
            return PersonRef(
                text=text, name=_as_name(" ".join(words[i:])), relation=" ".join(words[:i]).lower()
            )
    return PersonRef(text=text, name=None, relation=" ".join(words).lower())


def name_from_hint(relation: str, hint: str | None) -> str | None:
    """The name the fact gives a relation: "my wife's name is Sarah", "Sarah is my wife",
    "my wife Sarah likes...", "my wife, Sarah, ..." → "Sarah"."""
    if not hint:
        return None
    rel = re.escape(relation)
    # "My" is capitalised at the start of a sentence; the relation may be too.
    rel = "".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in rel)
    patterns = [
        rf"\b[Mm]y\s+{rel}(?:'s|’s)?\s+(?:name\s+is|is\s+called|is\s+named)\s+(?P<n>{_NAME})",
        rf"(?P<n>{_NAME})\s+is\s+my\s+{rel}\b",
        rf"\b[Mm]y\s+{rel},?\s+(?P<n>{_NAME})",
    ]
    for pattern in patterns:
        for m in re.finditer(pattern, hint):
            name = _trim_name(m.group("n"))
            if name:
                return name
    return None


def relation_from_hint(name: str, hint: str | None) -> str | None:
    """The relation the fact gives a name: "Sarah is my wife", "Sarah, my wife, ..." → "wife"."""
    if not hint:
        return None
    m = re.search(
        rf"\b{re.escape(name)},?\s+(?:is\s+)?my\s+(?P<r>[a-z-]+(?:\s+[a-z-]+)?)",
        hint,
    )
    if not m:
        return None
    words = m.group("r").split()
    for i in range(len(words), 0, -1):
        if _is_relation_phrase(words[:i]):
            return " ".join(words[:i]).lower()
    return None


def _trim_name(candidate: str) -> str | None:
    words = candidate.split()
    # "Sarah Likes" is not a surname: keep a second word only if it is not a verb-ish lowercase.
    if not words or words[0] in _NOT_NAMES:
        return None
    if len(words) == 2 and words[1].lower() in {"and", "is", "likes", "loves", "has", "was"}:
        words = words[:1]
    name = " ".join(words).strip("'’-")
    return name or None
