"""The offline extractor: the extraction jobs without a network or a model.

- summary: extractive (title from the first substantive user sentence, key points
  are the highest-scoring sentences by word frequency, topics the most frequent
  content words and the tools used);
- facts: patterns over the *user's* lines only ("my X is Y", "I like / prefer /
  hate / use ...", "call me ...", "remember that ...", "my wife Sarah ..."), each
  marked ``heuristic`` with a lower confidence than a model would give;
- equivalence: same content words; decision rewrite: not possible (None).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from shared.llm.schemas import Category, EpisodeSummary, FactCandidate
from shared.llm.transcript import Line, Transcript

STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are aren't as at be because been
before being below between both but by can can't cannot could couldn't did didn't do does
doesn't doing don't down during each few for from further get got had hadn't has hasn't have
haven't having he he'd he'll he's her here here's hers herself him himself his how how's i i'd
i'll i'm i've if in into is isn't it it's its itself just let let's like me more most mustn't
my myself no nor not now of off on once only or other ought our ours ourselves out over own
really same shan't she she'd she'll she's should shouldn't so some such than that that's the
their theirs them themselves then there there's these they they'd they'll they're they've this
those through to too under until up us very was wasn't we we'd we'll we're we've were weren't
what what's when when's where where's which while who who's whom why why's will with won't would
wouldn't you you'd you'll you're you've your yours yourself yourselves yes yeah ok okay oh hi
hello hey thanks thank please sure great good well know think want need going go one
thing things lot much many way time right actually maybe something anything everything even
still back make made say said tell told see saw look looks looking use used using sounds
always never ever day days today yesterday tomorrow week year new also wow glad nice cool
awesome amazing love loved fun pretty definitely totally kind sort feel feeling
""".split()
)

RELATIONS = frozenset(
    """
wife husband partner girlfriend boyfriend fiance fiancee spouse mother mom mum father dad
son daughter brother sister sibling grandma grandmother grandpa grandfather aunt uncle cousin
niece nephew friend colleague coworker co-worker boss manager teammate roommate neighbor
neighbour mentor kid child baby dog cat
""".split()
)

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")
_GREETING = re.compile(r"(?i)^(hi|hello|hey|good (morning|afternoon|evening)|yo|thanks|ok)\b")
_HEDGE = re.compile(r"(?i)\b(maybe|might|i think|i guess|probably|not sure|kind of|sort of)\b")
_CLAUSE_END = re.compile(r"[.;!?]|,\s|\s(?:but|because|since|although|though|so that)\s")
_NAME = r"((?-i:[A-Z][a-z]+(?:\s[A-Z][a-z]+)?))"
_REL = r"(" + "|".join(sorted(RELATIONS, key=len, reverse=True)) + r")"
_VERB3 = {
    "am": "is",
    "'m": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "was": "was",
    "can": "can",
    "will": "will",
    "would": "would",
    "could": "could",
    "should": "should",
    "'ve": "has",
    "'ll": "will",
    "'d": "would",
}

CONF_EXPLICIT = 0.75
CONF_STATEMENT = 0.7
CONF_PATTERN = 0.65
CONF_HEDGED = 0.5


def words(text: str) -> list[str]:
    return [w.lower().strip("'-") for w in _WORD.findall(text)]


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if len(w) > 2 and w not in STOPWORDS]


def _sentences(line: Line) -> list[str]:
    return [s.strip() for s in _SENT.split(line.text) if len(s.strip()) > 1]


def _clip_words(text: str, n: int) -> str:
    parts = text.split()
    return " ".join(parts[:n]) + ("…" if len(parts) > n else "")


def _clause(text: str, max_words: int = 14) -> str:
    m = _CLAUSE_END.search(text)
    return _clip_words((text[: m.start()] if m else text).strip(" \"'"), max_words).rstrip(",")


def _verb3(verb: str) -> str:
    v = verb.lower()
    if v in _VERB3:
        return _VERB3[v]
    if v.endswith(("s", "sh", "ch", "x", "o")):
        return verb + "es"
    if v.endswith("y") and len(v) > 2 and v[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def third_person(text: str, name: str) -> str:
    """Rewrite a first-person clause about the user in the third person ("I like X" →
    "Tim likes X")."""

    def subject_verb(m: re.Match[str]) -> str:
        return f"{name} {_verb3(m.group(1))}"

    text = re.sub(r"\bI'm\b|\bI am\b", f"{name} is", text)
    text = re.sub(r"\bI've\b", f"{name} has", text)
    text = re.sub(r"\bI'll\b", f"{name} will", text)
    text = re.sub(r"\bI (?:really |also |just |totally )?(\w+)", subject_verb, text)
    text = re.sub(r"(?i)\bmy\b", f"{name}'s", text)
    text = re.sub(r"(?i)\bmine\b", f"{name}'s", text)
    text = re.sub(r"(?i)\b(me|myself)\b", name, text)
    return text


class OfflineExtractor:
    """Extraction jobs without a model; every fact it proposes is ``heuristic``."""

    heuristic = True
    name = "offline"

    async def summarize(self, transcript: Transcript) -> EpisodeSummary:
        return summarize(transcript)

    async def extract_facts(
        self, transcript: Transcript, summary: EpisodeSummary, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        return extract_facts(transcript)

    async def same_fact(self, a: str, b: str) -> bool:
        wa, wb = set(content_words(a)), set(content_words(b))
        return bool(wa) and wa == wb

    async def narrative(self, user_name: str, facts: Sequence[str]) -> str:
        return narrative(user_name, facts)

    async def rewrite_decision(self, text: str) -> str | None:
        return None


def summarize(transcript: Transcript) -> EpisodeSummary:
    """An extractive summary; fewer than 3 turns gives a minimal one."""
    lines = [ln for ln in transcript.lines if ln.kind == "message"]
    user = transcript.user_name or "The user"
    freq = Counter(
        w for ln in transcript.lines for w in content_words(ln.text) if ln.kind == "message"
    )
    tools = list(
        dict.fromkeys(
            ln.tool_name for ln in transcript.lines if ln.kind == "tool_call" and ln.tool_name
        )
    )
    topics = list(
        dict.fromkeys([*(t.lower() for t in tools), *(w for w, _ in freq.most_common(8))])
    )[:5]
    title = _title(lines, tools)
    if transcript.turns < 3:
        said = " ".join(f"{ln.speaker}: {_clip_words(ln.text, 40)}" for ln in lines)
        return EpisodeSummary(
            title=title,
            summary=said or "An empty conversation.",
            key_points=[],
            outcome="informational",
            topics=topics[:3],
        )
    scored: list[tuple[float, int, str, str]] = []
    seen: set[str] = set()
    position = 0
    for ln in lines:
        for s in _sentences(ln):
            position += 1
            cw = content_words(s)
            if len(cw) < 2 or s.endswith("?") or s.lower() in seen:
                continue
            seen.add(s.lower())
            score = sum(freq[w] for w in set(cw)) / (len(words(s)) ** 0.5)
            scored.append((score, position, ln.speaker, _clip_words(s, 30)))
    best = sorted(sorted(scored, reverse=True)[:5], key=lambda x: x[1])
    key_points = [f"{speaker}: {s}" for _, _, speaker, s in best]
    about = ", ".join(topics[:4]) if topics else "various things"
    intro = f"{user} talked with the assistant about {about}."
    if tools:
        intro += f" Tools used: {', '.join(tools)}."
    body = " ".join(f"{speaker} said: {s}" for _, _, speaker, s in best)
    return EpisodeSummary(
        title=title,
        summary=_clip_words(f"{intro} {body}".strip(), 150),
        key_points=key_points,
        outcome=_outcome(transcript),
        topics=topics,
    )


def _title(lines: Sequence[Line], tools: Sequence[str]) -> str:
    for ln in lines:
        if ln.role != "user":
            continue
        for s in _sentences(ln):
            s = _GREETING.sub("", s).strip(" ,!.")
            if len(content_words(s)) >= 2:
                t = _clip_words(s, 10).rstrip("?.!")
                return t[:1].upper() + t[1:]
    if tools:
        return "Used " + ", ".join(tools[:3])
    if lines:
        return _clip_words(lines[0].text, 10) or "Conversation"
    return "Empty conversation"


def _outcome(transcript: Transcript) -> str:
    msgs = [ln for ln in transcript.lines if ln.kind == "message"]
    if msgs and msgs[-1].role == "user" and msgs[-1].text.rstrip().endswith("?"):
        return "unresolved"
    if (
        any(ln.kind == "tool_result" for ln in transcript.lines)
        and msgs
        and msgs[-1].role == "assistant"
    ):
        return "resolved"
    return "informational"


def _category_for(verb: str, obj: str) -> Category:
    if verb in ("use", "uses", "using"):
        return "tool"
    return "preference"


def extract_facts(transcript: Transcript) -> list[FactCandidate]:
    """Pattern-based facts from the user's own lines."""
    name = transcript.user_name or "User"
    out: list[FactCandidate] = []
    seen: set[str] = set()
    for ln in transcript.lines:
        if ln.role != "user" or ln.kind != "message":
            continue
        for s in _sentences(ln):
            if s.rstrip().endswith("?"):
                continue
            for fact in _facts_in(s, name):
                key = fact.content.lower()
                if key not in seen:
                    seen.add(key)
                    out.append(fact)
    return out


def _fact(
    subject: str,
    content: str,
    *,
    category: Category,
    confidence: float,
    source: str,
    sentence: str,
    about: str = "user",
    tags: Sequence[str] = (),
) -> FactCandidate:
    content = content.strip().rstrip(",;:")
    if not content.endswith("."):
        content += "."
    return FactCandidate.model_validate(
        {
            "subject": subject,
            "about": about,
            "content": content[:1].upper() + content[1:],
            "category": category,
            "confidence": confidence,
            "tags": list(tags),
            "source": source,
            "source_context": sentence[:300],
            "stated_by": "user",
            "heuristic": True,
        }
    )


def _facts_in(s: str, name: str) -> list[FactCandidate]:
    hedged = bool(_HEDGE.search(s))
    out: list[FactCandidate] = []

    m = re.search(r"(?i)\bremember (?:that )?(.+)", s)
    if m:
        body = _clause(m.group(1), 24)
        if len(content_words(body)) >= 2:
            out.append(
                _fact(
                    name,
                    third_person(body, name),
                    category="other",
                    confidence=CONF_EXPLICIT,
                    source="user_explicit",
                    sentence=s,
                )
            )
            return out

    m = re.search(r"(?i)\b(?:call me|my name is|i go by)\s+" + _NAME, s)
    if m:
        called = m.group(1)
        verb = (
            "prefers to be called"
            if "call" in m.group(0).lower() or "go by" in m.group(0).lower()
            else "is named"
        )
        out.append(
            _fact(
                name,
                f"{name} {verb} {called}",
                category="preference",
                confidence=CONF_EXPLICIT,
                source="user_explicit",
                sentence=s,
                tags=["name"],
            )
        )
        return out

    # "my wife Sarah ...", "my wife's name is Sarah", "my friend Sam loves climbing"
    m = re.search(
        r"(?i)\bmy (?-i:(?:best |little |older |younger |big )?)"
        + _REL
        + r"(?:'s name is| is called| is named)\s+"
        + _NAME,
        s,
    )
    if m:
        rel, person = m.group(1).lower(), m.group(2)
        out.append(
            _fact(
                f"my {rel} {person}",
                f"{name}'s {rel} is named {person}",
                category="person",
                confidence=CONF_EXPLICIT,
                source="user_explicit",
                sentence=s,
                about="person",
            )
        )
        return out
    m = re.search(
        r"(?i)\bmy "
        + _REL
        + r"(?:,)?(?:\s+"
        + _NAME
        + r")?(?:,)?\s+(likes|loves|enjoys|hates|prefers|uses|lives|works|is|has|"
        r"wants|plays|studies|just|recently)\b\s*(.*)",
        s,
    )
    if m:
        rel, person, verb, rest = m.group(1).lower(), m.group(2), m.group(3), m.group(4)
        obj = _clause(rest)
        if len(content_words(obj)) >= 1:
            who = f"{person} ({name}'s {rel})" if person else f"{name}'s {rel}"
            subject = f"my {rel} {person}" if person else f"my {rel}"
            out.append(
                _fact(
                    subject,
                    f"{who} {verb} {obj}",
                    category="person",
                    confidence=CONF_HEDGED if hedged else CONF_PATTERN,
                    source="conversation",
                    sentence=s,
                    about="person",
                )
            )
            return out

    m = re.search(r"(?i)\bmy ((?:[\w-]+\s){0,3}?[\w-]+) (?:is|are) (.+)", s)
    if m and m.group(1).split()[-1].lower() not in RELATIONS:
        thing, value = m.group(1), _clause(m.group(2))
        if value and len(words(value)) <= 12:
            fav = any(w in thing.lower() for w in ("favorite", "favourite", "preferred"))
            out.append(
                _fact(
                    name,
                    f"{name}'s {thing} is {value}",
                    category="preference" if fav else "other",
                    confidence=CONF_HEDGED if hedged else CONF_STATEMENT,
                    source="user_explicit",
                    sentence=s,
                )
            )

    for m in re.finditer(
        r"(?i)\bI (?:really |also |totally |absolutely |kind of |do )?"
        r"(like|love|enjoy|prefer|hate|dislike|use|can't stand|don't like)"
        r"\s+(.+)",
        s,
    ):
        verb, obj = m.group(1).lower(), _clause(m.group(2))
        if len(content_words(obj)) < 1:
            continue
        phrase = {"can't stand": "can't stand", "don't like": "doesn't like"}.get(
            verb, _verb3(verb)
        )
        out.append(
            _fact(
                name,
                f"{name} {phrase} {obj}",
                category=_category_for(verb, obj),
                confidence=CONF_HEDGED if hedged else CONF_PATTERN,
                source="conversation",
                sentence=s,
            )
        )

    m = re.search(r"(?i)\bI(?: am|'m) (?:a|an) (.+)", s)
    if m:
        obj = _clause(m.group(1), 8)
        if len(content_words(obj)) >= 1:
            out.append(
                _fact(
                    name,
                    f"{name} is a {obj}",
                    category="other",
                    confidence=CONF_HEDGED if hedged else CONF_PATTERN,
                    source="conversation",
                    sentence=s,
                )
            )
    m = re.search(r"(?i)\bI (live|work|study) (in|at|for|as) (.+)", s)
    if m:
        obj = _clause(m.group(3), 8)
        if obj:
            out.append(
                _fact(
                    name,
                    f"{name} {_verb3(m.group(1))} {m.group(2)} {obj}",
                    category="other",
                    confidence=CONF_HEDGED if hedged else CONF_PATTERN,
                    source="conversation",
                    sentence=s,
                )
            )
    return out


def narrative(user_name: str, facts: Sequence[str]) -> str:
    """A plain narrative from fact lines (used when no model is configured)."""
    if not facts:
        return f"Nothing is known about {user_name} yet."
    body = " ".join(f if f.endswith(".") else f + "." for f in facts)
    return f"What is known about {user_name}: {body}"
