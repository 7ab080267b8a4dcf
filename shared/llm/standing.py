"""Standing instructions and preferences (Nova's ``instruction`` and ``preference``
memories), learned offline from the *user's* turns by a stated rule.

What a user asks the assistant to do from now on ("Always format code with
syntax highlighting when I ask about implementation details", "please keep
answers short from now on") and what they prefer ("I prefer minimal
dependencies") hold for every later answer, not only for the question they
came with. The rule reads only lines of role ``user`` (a signal every chat
carries, whatever its shape), sentence by sentence:

- an **instruction** is an imperative addressed to the assistant with a
  habitual marker: it opens with "always" / "never" / "don't ever" (after an
  optional "please"), or it asks the assistant ("please ...", "I want you to
  ...", "can you ...") to do something "from now on", "going forward", "from
  here on", "in future", "every time" / "whenever" / "each time"; a one-off
  request ("please help me with X") is not one;
- a **preference** is a first-person preference verb: "I prefer", "I'd
  prefer", "I'd rather ... than ...", "my preference is / for"; its
  clause runs to the end of the sentence or to the question that follows it
  (", can you help me ..."), so "I prefer simple, minimal dependencies, how can
  I ..." gives "User prefers simple, minimal dependencies."; hedged or
  negated forms ("I'm not sure I prefer", "if I prefer") are not.

Each is written in the third person about the speaker ("when User asks",
"User prefers"), capped at :data:`MAX_WORDS` words, marked ``heuristic`` with
its sentence as ``source_context`` (so the pipeline links it to its turn).
The pipeline stores them through the one memory writer like any learned fact
(dedupe, supersession), under a limit of their own per episode
(``services.extractor.standing``).
"""

from __future__ import annotations

import re

from shared.llm.schemas import FactCandidate
from shared.llm.transcript import Line, Transcript

MAX_WORDS = 40
MIN_WORDS = 3
CONF_INSTRUCTION = 0.8
CONF_PREFERENCE = 0.75
LINE_CHARS = 4_000  # of each turn, what is read (a pasted log is read as its head)
STANDING = 12_000  # characters of the user's lines a model is sent (head and tail kept)

_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_HABIT = (
    r"from now on|going forward|moving forward|from here on(?: out)?|in (?:the )?future|"
    r"every time|each time|whenever|for all future|in all (?:your|future) (?:answers|responses|"
    r"replies)|at all times"
)
# What an assistant is told to do: the verb an instruction opens with ("always
# *include*", "never *use*"); "Always up for it", "Never been there", "Always love
# having fun" (chit-chat that opens the same way) are not instructions.
DIRECTIVES = frozenset(
    """
include use format provide give answer respond reply write keep show add explain mention
list cite confirm report highlight specify tell ask check double-check remind put start end
begin avoid make label state note summarize summarise prioritize prioritise tailor maintain
combine break walk offer suggest recommend present display round convert express quote
translate spell be follow stick limit wrap call refer assume compare return sort order
organize organise structure bold number attach link credit default treat reference speak
address timestamp annotate comment document test validate verify clarify describe outline
detail emphasize emphasise stress point focus go send sign greet close open lead frame
phrase word rephrase simplify shorten expand elaborate split group separate pair back support
accompany illustrate visualize visualise diagram draw chart plot calculate compute estimate
measure express indicate flag warn alert note double triple
""".split()
)
_DIRECTIVE = r"(?:" + "|".join(sorted(DIRECTIVES, key=len, reverse=True)) + r")\b"
# "Always include ...", "Please never use ...", "Don't ever ..."
_ALWAYS = re.compile(
    r"(?i)^(?:(?:ok(?:ay)?|also|and|so|one more thing|oh|hey)[,!.]?\s+)*(?:please,?\s+)?"
    r"(?P<body>(?:always|never|don't ever|do not ever)\s+" + _DIRECTIVE + r".*)"
)
# a request with a habitual marker: "Please use metric units from now on",
# "I want you to answer in French going forward", "Can you keep it short from now on?"
_REQUEST = re.compile(
    r"(?i)^(?:(?:ok(?:ay)?|also|and|so|oh|hey)[,!.]?\s+)*"
    r"(?:please|i want you to|i'd like you to|i would like you to|i need you to|"
    r"(?:can|could|would|will) you(?: please)?)\s+(?:always\s+)?(?P<body>" + _DIRECTIVE + r".*)"
)
_HABITUAL = re.compile(rf"(?i)\b(?:{_HABIT})\b")
_PREFER = re.compile(
    r"(?i)\b(?:I(?P<verb> (?:really |also |generally |usually |much |definitely |still |now |"
    r"always )?prefer|(?:['’]d| would) (?:much |really )?(?:prefer|rather))|"
    r"my (?P<noun>preference) (?:is|for|would be))\b\s*(?P<what>.+)"
)
# hedged, conditional or negated: not a stated preference
_NOT_STATED = re.compile(
    r"(?i)\b(?:not sure (?:if |whether )?|don't know (?:if |whether )?|if|whether|unless|"
    r"do you|would you|don't|do not|no longer|not)\s+(?:I\s+)?(?:really\s+)?$"
)
# where the preference's clause ends: a question or a request after it
_CLAUSE_END = re.compile(
    r"[?;!]|\.(?:\s|$)|,?\s+(?:can|could|would|will|should|do|does|is|are)\s+"
    r"(?:you|I|we|it|this|that|there)\b|,\s+(?:how|what|which|where|when|why|but|so|and I'm|"
    r"and I am|and I|and also|and then|and can|and how|because|since|considering|though|"
    r"although|especially|any|maybe|like I|as I|by the way|btw|anyway|too|as well)\b|"
    r"\s+(?:but|so that|because)\s"
)
_VAGUE = frozenset("it that this them one either both neither those these so".split())
_FIRST = re.compile(
    r"\b(?P<i_am>I['’]m|I am)\b|\b(?P<i_have>I['’]ve)\b|\bI (?P<verb>[a-z]+)\b|\bI\b|"
    r"(?i:\b(?P<my>my)\b)|(?i:\b(?P<me>me)\b)|(?i:\b(?P<myself>myself)\b)"
)
_THIRD = {"ask": "asks", "need": "needs", "want": "wants", "request": "requests", "say": "says"}


def _sentences(text: str) -> list[str]:
    return [" ".join(s.split()) for s in _SENT.split(text[:LINE_CHARS]) if s.strip()]


def _words(text: str) -> int:
    return len(text.split())


def _clip(text: str) -> str:
    parts = text.split()
    return " ".join(parts[:MAX_WORDS]).rstrip(" ,;:-") if len(parts) > MAX_WORDS else text


def about(text: str, name: str) -> str:
    """``text`` with the speaker's I / my / me as ``name`` ("when I ask" -> "when User
    asks"): an instruction read later says whose it is."""

    def one(m: re.Match[str]) -> str:
        g = m.lastgroup
        if g == "i_am":
            return f"{name} is"
        if g == "i_have":
            return f"{name} has"
        if g == "verb":
            v = m.group("verb")
            return f"{name} {_THIRD.get(v, v)}"
        if g == "my":
            return f"{name}'s"
        if g == "me":
            return name
        if g == "myself":
            return name
        return name

    return _FIRST.sub(one, text)


def _sentence(text: str) -> str:
    text = text.strip().rstrip(" ,;:-")
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def instruction_in(sentence: str, name: str) -> str | None:
    """The standing instruction a user's sentence gives, in the third person, or None."""
    m = _ALWAYS.match(sentence)
    if m is None:
        m = _REQUEST.match(sentence)
        if m is None or not _HABITUAL.search(sentence):
            return None
    body = m.group("body").rstrip("?").strip()
    if _words(body) < MIN_WORDS:
        return None
    return _sentence(_clip(about(body, name)))


def preference_in(sentence: str, name: str) -> str | None:
    """The preference a user's sentence states, as "<name> prefers ...", or None."""
    m = _PREFER.search(sentence)
    if m is None or _NOT_STATED.search(sentence[: m.start()]):
        return None
    what = m.group("what")
    end = _CLAUSE_END.search(what)
    what = (what[: end.start()] if end else what).strip(" ,;:-")
    what = re.sub(r"(?i)^(?:to )?(?:it|that|this) (?=if|when)", "", what)
    if _words(what) < (1 if m.group("noun") is None else 3) or what.lower() in _VAGUE:
        return None
    verb = m.group("verb") or ""
    if "rather" in verb.lower() and not re.search(r"(?i)\bthan\b", what):
        return None  # "I'd rather show you a photo": a choice now, not a standing one
    if "rather" in verb.lower():
        text = f"{name} would rather {about(what, name)}"
    elif m.group("noun"):
        text = f"{name}'s preference is {about(what, name)}"
    else:
        text = f"{name} prefers {about(what, name)}"
    return _sentence(_clip(text))


def _candidate(
    name: str, content: str, category: str, confidence: float, sentence: str
) -> FactCandidate:
    return FactCandidate.model_validate(
        {
            "subject": name,
            "about": "user",
            "content": content,
            "category": category,
            "confidence": confidence,
            "tags": [category],
            "source": "heuristic",
            "source_context": sentence[:300],
            "stated_by": "user",
            "heuristic": True,
        }
    )


def user_lines(transcript: Transcript) -> list[Line]:
    """The user's own messages (role ``user``), in order."""
    return [ln for ln in transcript.lines if ln.kind == "message" and ln.role == "user"]


def standing(transcript: Transcript) -> list[FactCandidate]:
    """The instructions and preferences the user's turns state, in the order said,
    without repeats (a later wording of the same text is the same candidate)."""
    out: list[FactCandidate] = []
    seen: set[str] = set()
    for ln in user_lines(transcript):
        name = ln.speaker or transcript.user_name or "User"
        for s in _sentences(ln.text):
            found = instruction_in(s, name)
            kind, conf = "instruction", CONF_INSTRUCTION
            if found is None:
                found = preference_in(s, name)
                kind, conf = "preference", CONF_PREFERENCE
            if found is None or found.lower() in seen:
                continue
            seen.add(found.lower())
            out.append(_candidate(name, found, kind, conf, s))
    return out
