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
from shared.llm.standing import standing
from shared.llm.transcript import Line, Transcript
from shared.memory.dedupe import same_offline
from shared.text import clip

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
_GREETING = re.compile(
    r"(?i)^(hi|hello|hey|hiya|good (morning|afternoon|evening|luck)|yo|thanks|thank you|ok|"
    r"long time|congrat\w*|bye|see you|take care|woo+hoo+|wow)\b"
)
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

# Verbs that stay as they are after a third-person subject: past tenses and modals.
_UNCHANGED = frozenset(
    """
went got had was made took saw found felt did bought ran came gave left met began thought
told said knew wrote won lost sold kept spent built brought taught caught heard held became
grew drew flew threw wore swam sang rode drove ate fell broke chose forgot understood
stood sat spoke struck swore tore wept bit hid lit shot slept slid spun stuck swept swung
woke overcame forgave began rang sank stole wound paid laid lent sent spent dealt meant
can could will would should might must may shall never always also just often usually
""".split()
)

CONF_EXPLICIT = 0.75
CONF_STATEMENT = 0.7
CONF_PATTERN = 0.65
CONF_HEDGED = 0.5

ASSISTANT = "Assistant"  # the speaker of an assistant line without a display name

# Hard limits of the summary, by construction (the schema allows more).
TITLE_WORDS = 10
TITLE_CHARS = 120
SUMMARY_WORDS = 150
SUMMARY_CHARS = 1_200
KEY_POINT_CHARS = 240
TOPIC_CHARS = 30
LINE_CHARS = 4_000  # of each turn, what is read (a 3 MB turn is read as its head)
FACT_WORDS = 30
ASKED = 2  # the user's questions the summary names
ASKED_WORDS = 25

NOT_TOPICS = frozenset(
    """
take taking took taken give giving gave get getting come coming came keep keeping kept
start starting started try trying tried find found put bring brought call called ask asked
big small little huge tiny large last next first second third best better worse worst bad
nice happy sad excited proud sure true real whole own other another every each same different
old young long short high low hard easy early late recent recently lately ago soon
super truly totally absolutely really quite bit lots tons part kinda gonna wanna gotta
special important awesome wonderful beautiful incredible fantastic lovely sweet cute
guys folks people someone somebody everyone everybody anyone stuff ones idea ideas
mean means meant hear heard talk talking talked chat chatting chatted share shares shared
image photo picture pic pics glad thanks thank hope hoping hoped wish wishing wished
feel feels felt glad mind minds moment moments life lives experience experiences
chance chances step steps journey place places part parts kind kinds lot lots bit
inspiring inspire inspired together tough difference making wait appreciate around must
helps help helping stay staying positive negative others other wonder wonders amazing
keep keeps tho though anyway yeah yep hey awesome seriously literally basically enjoy
enjoyed enjoying enjoys loves loving lovely doing going getting trying feeling having
coming working looking thinking taking giving seeing saying telling hearing
everything anything nothing something sounds sound good great fine okay crazy wild
since years months weeks hours minutes ago till until whenever lately
""".split()
)

VERBS = frozenset(
    """
take go do get make look think try feel have come work keep say see want need let find put
bring call ask tell know mean hear talk chat share hope wish give start plan plans inspire
help stay wait appreciate move love enjoy live care manage handle push deal check set
""".split()
)

_INTERJECTION = re.compile(
    r"(?i)^(?:(?:yeah|yes|yep|oh|ooh|wow|whoa|well|so|haha|hah|hey|hi|hello|um|uh|and|but|"
    r"also|plus|actually|honestly|lol|aw+|ah|omg|ok|okay|totally|true|nice|cool|"
    r"thanks|thank you|ha)\b[,!.]*\s*)+"
)
_REACTION = re.compile(
    r"(?i)^(?:I|I'm|I am)\s+(?:so |really |totally |just |also |truly |completely )*"
    r"(?:think|guess|hope|bet|agree|know|mean|see|understand|appreciate|wish|wonder|believe|"
    r"feel like|can't wait|can imagine|can't imagine|can tell|remember when|love that|"
    r"like that|admire|'m (?:sure|glad|sorry|happy for|proud of|thrilled for|here for)|"
    r"am (?:sure|glad|sorry|happy for|proud of))\b|^(?:that|this|it)(?:'s| is| was| sounds)\b"
)
_UNFINISHED = re.compile(
    r"(?i)\b(?:a|an|the|my|his|their|our|your|its|and|or|but|nor|than|because|whose|"
    r"a few|several|a couple|a couple of|one of)\W*$"
)
"""A sentence ending on a word that needs more ("... planning a few.", "... and the."): its
noun was said before, or it was cut; never a statement to keep."""
_PLURAL_OR_GENERIC = re.compile(
    r"(?i)\b(?:we|we're|we've|we'll|we'd|us|our|ours|ourselves|yourself|yourselves)\b"
)
"""Who "we" are (the speaker's family, team, friends) and whom a generic "yourself" means
are not in the sentence: reported as the two speakers they would be misattributed."""
_RELATIVE_BEFORE = re.compile(r"(?i)\b(?:which|that|what|who|whom|where)\s*$")
_NO_OBJECT = re.compile(r"(?i)^(?:for|with|in|at|on|from|by|because|about|as)\b")


def whole(text: str) -> bool:
    """Whether ``text`` reads as a whole statement: no "…", no unfinished ending."""
    t = text.strip().rstrip(".!")
    return bool(t) and "…" not in t and "..." not in t and _UNFINISHED.search(t) is None


_FIRST_PERSON = re.compile(
    r"^(?:(?:last|this|next) (?:week|weekend|month|year|night|summer|fall|winter|spring|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|yesterday|today|recently|"
    r"lately|a few (?:days|weeks|months) ago|(?:two|three|a couple of) (?:days|weeks) ago),?\s+"
    r"|^(?=I\b|I'|My\b)",
    re.I,
)


def words(text: str) -> list[str]:
    return [w.lower().strip("'-") for w in _WORD.findall(text)]


def content_words(text: str) -> list[str]:
    return [w for w in words(text) if len(w) > 2 and w not in STOPWORDS]


def _head(text: str) -> str:
    return text[:LINE_CHARS]


def _sentences(line: Line) -> list[str]:
    return [s.strip() for s in _SENT.split(_head(line.text)) if len(s.strip()) > 1]


def _clip_words(text: str, n: int) -> str:
    parts = text.split()
    return " ".join(parts[:n]) + ("…" if len(parts) > n else "")


def _clip_title(text: str) -> str:
    title = clip(_clip_words(" ".join(text.split()), TITLE_WORDS), TITLE_CHARS)
    return title or "Conversation"


def _strip_interjections(s: str, names: Sequence[str] = ()) -> str:
    """Without leading "Yeah, so ..." and a leading address ("Mel, ...")."""
    out = _INTERJECTION.sub("", s).strip()
    m = re.match(r"([A-Z][a-z]+),\s+", out)
    if m and any(n.startswith(m.group(1)) for name in names for n in name.split()):
        out = out[m.end() :]
    return out[:1].upper() + out[1:] if out else out


def _clause(text: str, max_words: int = 14) -> str:
    m = _CLAUSE_END.search(text)
    return _clip_words((text[: m.start()] if m else text).strip(" \"'"), max_words).rstrip(",")


def _verb3(verb: str) -> str:
    v = verb.lower()
    if v in _VERB3:
        return _VERB3[v]
    if (
        v in _UNCHANGED
        or (v.endswith("ed") and not v.endswith("eed") and len(v) > 3)
        or v.endswith(("ook", "ought", "aught", "ew", "ly"))
        or "'" in v
    ):
        return verb
    if v.endswith(("s", "sh", "ch", "x", "o")):
        return verb + "es"
    if v.endswith("y") and len(v) > 2 and v[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


_FIRST = re.compile(
    r"\b(?P<be>I'm|I am)\b|\b(?P<have>I've)\b|\b(?P<will>I'll)\b|\b(?P<would>I'd)\b"
    r"|\bI (?P<adverb>(?:[a-z]+ly |just |also |still |even |then |now |never |always |often )?)"
    r"(?P<verb>[A-Za-z']+)"
    r"|(?i:\b(?P<my>my|mine)\b)|(?i:\b(?P<myself>myself)\b)|(?i:(?<![\w-])(?P<me>me)(?![\w-]))"
)
_SECOND = re.compile(
    r"(?i)\b(?:(?P<we_are>we're|we are)|(?P<we_have>we've)|(?P<we>we)|(?P<our>our)|(?P<us>us)"
    r"|(?P<you_are>you're|you are)|(?P<you_were>you were)|(?P<you_have>you've)"
    r"|(?P<you_will>you'll)|(?P<you_would>you'd)|(?P<yourself>yourself)"
    r"|(?P<your>yours?)(?=\s|$|[.,!;])|(?P<you>you))\b"
)


def third_person(text: str, name: str, other: str | None = None) -> str:
    """Rewrite a first-person clause of ``name`` in the third person ("I like X" ->
    "Tim likes X"); with ``other``, "you" becomes that person and "we" both of them."""

    def first(m: re.Match[str]) -> str:
        g = m.lastgroup
        if g == "verb":
            return f"{name} {m.group('adverb') or ''}{_verb3(m.group('verb'))}"
        return {
            "be": f"{name} is",
            "have": f"{name} has",
            "will": f"{name} will",
            "would": f"{name} would",
            "my": f"{name}'s",
            "myself": "themself",
            "me": name,
        }.get(g or "", m.group(0))

    text = _FIRST.sub(first, text)
    if not other:
        return text
    both = f"{name} and {other}"
    second = {
        "we_are": f"{both} are",
        "we_have": f"{both} have",
        "we": both,
        "our": "their",
        "us": "them",
        "you_are": f"{other} is",
        "you_were": f"{other} was",
        "you_have": f"{other} has",
        "you_will": f"{other} will",
        "you_would": f"{other} would",
        "yourself": other,
        "your": f"{other}'s",
        "you": other,
    }
    return _SECOND.sub(lambda m: second.get(m.lastgroup or "", m.group(0)), text)


_TRAILING_DOTS = re.compile(r"\s*(?:\.\.\.+|…)\s*$")


def reported(sentence: str, speaker: str, other: str | None) -> str:
    """A sentence as reported speech about named people ("Caroline went to ..."); the
    caller gives a whole sentence of at most ``FACT_WORDS`` words (it is never cut)."""
    s = _TRAILING_DOTS.sub("", sentence).rstrip(" ,;:-")
    text = third_person(s, speaker, other)
    if not re.match(rf"(?:[\w ,']{{0,40}}\s)?{re.escape(speaker)}\b", text):
        first = text.split(" ", 1)[0]
        if first.lower() in STOPWORDS or first.lower() in NOT_TOPICS:
            text = text[:1].lower() + text[1:]
        text = f"{speaker} said that {text}"
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "…")) else text + "."


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

    async def extract_standing(
        self, transcript: Transcript, *, occurred_at: datetime
    ) -> list[FactCandidate]:
        return standing(transcript)

    async def same_fact(self, a: str, b: str) -> bool:
        return same_offline(a, b)

    async def contradicts(self, older: str, newer: str) -> bool | None:
        return None  # no model: supersession decides by the attribute rule alone

    async def narrative(self, user_name: str, facts: Sequence[str]) -> str:
        return narrative(user_name, facts)

    async def observe(self, statements: Sequence[str]) -> str:
        return observation(statements)

    async def rewrite_decision(self, text: str) -> str | None:
        return None


def summarize(transcript: Transcript) -> EpisodeSummary:
    """An extractive summary of who said what about which topics; fewer than 3 turns
    gives a minimal one. Every field is within its limit by construction."""
    lines = [ln for ln in transcript.lines if ln.kind == "message"]
    names = participants(transcript)
    tools = list(
        dict.fromkeys(
            clip(ln.tool_name, TOPIC_CHARS)
            for ln in transcript.lines
            if ln.kind == "tool_call" and ln.tool_name
        )
    )
    topics = _topics(lines, names, tools)
    if transcript.turns < 3:
        said = " ".join(
            f"{clip(ln.speaker, 60)}: {_clip_words(_head(ln.text), 40)}" for ln in lines
        )
        who = names[0] if names else "someone"
        title = f"Short exchange with {who}" if not topics else "Short exchange on " + topics[0]
        return EpisodeSummary(
            title=_clip_title(title),
            summary=clip(said, SUMMARY_CHARS) or "An empty conversation.",
            key_points=[],
            outcome="informational",
            topics=topics[:3],
        )
    freq = Counter(w for ln in lines for w in content_words(_head(ln.text)))
    scored: list[tuple[float, int, str, str, str | None]] = []
    seen: set[str] = set()
    position = 0
    for ln in lines:
        other = _other(ln.speaker, names)
        for s in _sentences(ln):
            position += 1
            s = _strip_interjections(s, names)
            cw = content_words(s)
            if (
                len(cw) < 3
                or s.startswith("[")
                or "?" in s
                or _GREETING.match(s)
                or _REACTION.search(s)
                or s.lower() in seen
                or len(s.split()) > FACT_WORDS
                or _PLURAL_OR_GENERIC.search(s)
                or not whole(_TRAILING_DOTS.sub("", s))
            ):
                continue
            seen.add(s.lower())
            score = sum(freq[w] for w in set(cw)) / (len(words(s)) ** 0.5)
            score *= 1.5 if _FIRST_PERSON.match(s) else 1.0
            scored.append((score, position, s, _speaker(ln), other))
    # only the best sentences are rewritten (the rewrite is the costly part)
    best = sorted(scored, key=lambda x: (-x[0], x[1]))[:40]
    ranked = [(score, pos, reported(s, who, other)) for score, pos, s, who, other in best]
    intro = _intro(names, topics, tools)
    asked = _asked(lines, names, freq)
    if asked:
        intro += " " + " ".join(asked)
    budget = SUMMARY_WORDS - len(intro.split())
    room = SUMMARY_CHARS - len(intro) - 1
    chosen: list[tuple[float, int, str]] = []
    for item in ranked:
        n = len(item[2].split())
        if n <= budget and len(item[2]) + 1 <= room:  # whole sentences only, within both limits
            chosen.append(item)
            budget -= n
            room -= len(item[2]) + 1
        if budget < 5:
            break
    chosen.sort(key=lambda x: x[1])
    body = " ".join(text for _, _, text in chosen)
    key_points = [  # whole sentences: one longer than a key point may be is left out
        text
        for _, _, text in sorted([r for r in ranked if len(r[2]) <= KEY_POINT_CHARS][:5],
                                 key=lambda x: x[1])
    ]  # fmt: skip
    return EpisodeSummary(
        title=_title(names, topics, tools),
        summary=clip(f"{intro} {body}".strip(), SUMMARY_CHARS),
        key_points=key_points,
        outcome=_outcome(transcript),
        topics=topics,
    )


def _asked(lines: Sequence[Line], names: Sequence[str], freq: Counter[str]) -> list[str]:
    """What the user asked, in their words ("Tim asked: what's the weather in Silver
    Spring, MD today?"): the user's ``ASKED`` most central questions that name
    something (two content words or more), in the order asked. A question is often
    all a session says about what the user wanted, and the statements above never
    hold one."""
    found: list[tuple[float, int, str]] = []
    seen: set[str] = set()
    for position, ln in enumerate(lines):
        if ln.role != "user":
            continue
        for s in _sentences(ln):
            if not s.endswith("?"):
                continue
            q = _strip_interjections(s, names)
            cw = content_words(q)
            if len(cw) < 2 or q.lower() in seen or len(q.split()) > ASKED_WORDS:
                continue
            seen.add(q.lower())
            score = sum(freq[w] for w in set(cw)) / (len(words(q)) ** 0.5)
            found.append((score, position, q))
    best = sorted(sorted(found, key=lambda x: (-x[0], x[1]))[:ASKED], key=lambda x: x[1])
    out = []
    for _, position, q in best:
        who = _speaker(lines[position])
        text = third_person(q, who, _other(lines[position].speaker, names))
        out.append(f"{who} asked: {text[:1].lower() + text[1:]}")
    return out


def participants(transcript: Transcript) -> list[str]:
    """The people in the conversation, the user first (the assistant is not one)."""
    names = [
        clip(ln.speaker, 60)
        for ln in transcript.lines
        if ln.kind == "message" and ln.speaker and ln.speaker != ASSISTANT
    ]
    out = list(dict.fromkeys(names))
    user = transcript.user_name
    if user and user in out:
        out.remove(user)
        out.insert(0, user)
    return out


def _speaker(line: Line) -> str:
    return "the assistant" if line.speaker == ASSISTANT else clip(line.speaker, 60)


def _other(speaker: str, names: Sequence[str]) -> str | None:
    """Who "you" is for ``speaker``: the one other person, or the assistant."""
    others = [n for n in names if n != speaker]
    if speaker == ASSISTANT:
        return names[0] if len(names) == 1 else None
    if len(others) == 1:
        return others[0]
    return "the assistant" if not others else None


def _intro(names: Sequence[str], topics: Sequence[str], tools: Sequence[str]) -> str:
    about = _and(list(topics[:3])) if topics else "a few things"
    if len(names) >= 2:
        intro = f"{_and(list(names[:3]))} talked about {about}."
    elif names:
        intro = f"{names[0]} talked with the assistant about {about}."
    else:
        intro = f"The conversation was about {about}."
    if tools:
        intro += f" Tools used: {', '.join(tools[:3])}."
    return intro


def _title(names: Sequence[str], topics: Sequence[str], tools: Sequence[str]) -> str:
    """What the session was about, from its topics: never a line of the conversation."""
    if topics:
        about = _and(list(topics[:3]))
        title = f"{names[0]} on {about}" if len(names) == 1 else about[:1].upper() + about[1:]
        if len(names) >= 2:
            title = f"{names[0]} and {names[1]} on {about}"
    elif tools:
        title = "Used " + ", ".join(tools[:3])
    elif names:
        title = f"Conversation with {names[0]}"
    else:
        title = "Conversation"
    return _clip_title(title)


def _and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _topics(lines: Sequence[Line], names: Sequence[str], tools: Sequence[str]) -> list[str]:
    """Named things (capitalised words mid-sentence, "Silver Spring" as one) first, then
    frequent content words that are not verbs, adjectives or adverbs; never a
    participant's name."""
    skip = {n.lower() for name in names for n in name.split()}
    nick = [n for n in skip if len(n) > 3]
    named: Counter[str] = Counter()
    common: Counter[str] = Counter()
    shown: dict[str, str] = {}

    def wanted(w: str) -> bool:
        return not (
            len(w) > TOPIC_CHARS
            or len(w) < 3
            or w in skip
            or w in STOPWORDS
            or any(n.startswith(w) for n in nick)  # "Mel" for Melanie
        )

    for ln in lines:
        for s in _sentences(ln):
            run: list[str] = []
            for i, tok in enumerate([*_WORD.findall(s), ""]):
                bare = tok.strip("'-").removesuffix("'s")
                w = bare.lower()
                capital = i > 0 and tok[:1].isupper() and not re.match(r"I(?:'|$)", tok)
                if capital and wanted(w):
                    run.append(bare)
                    continue
                if run:
                    phrase = " ".join(run[:3])
                    named[phrase.lower()] += 1
                    shown.setdefault(phrase.lower(), phrase)
                    run = []
                if tok and not capital and wanted(w) and _is_topic_word(w):
                    common[w] += 1
    out = [t.lower() for t in tools]
    out += [shown[n] for n, c in named.most_common(6) if c >= 2]
    out += [w for w, c in common.most_common(12) if c >= 2]
    taken: set[str] = set()
    topics = []
    for t in out:
        if t.lower() not in taken and len(t) <= TOPIC_CHARS:
            taken.add(t.lower())
            taken.update(t.lower().split())
            topics.append(t)
    return topics[:5]


def _is_topic_word(w: str) -> bool:
    if w in NOT_TOPICS or w.endswith(("ly", "ed", "ful", "ous")):
        return False
    if w.endswith("ing"):
        stem = w[:-3]
        return not ({stem, stem + "e", stem[:-1]} & VERBS)
    return True


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


MAX_FACTS = 5  # Nous: at most 5 new facts per episode
MAX_FACTS_PER_SPEAKER = 3

_SECOND_OR_PLURAL = re.compile(
    r"(?i)\b(you|you're|you've|you'll|you'd|your|yours|yourself|we|we're|we've|we'll|our|ours|"
    r"us|ourselves)\b"
)
_FIRST_LEFT = re.compile(r"\b(I|I'm|I've|I'll|I'd)\b|(?i:\b(me|my|mine|myself)\b)")
# a thing or person the sentence leans on the conversation for: a learned fact must
# stand alone (docs/extractor.md "Facts that stand alone")
_VAGUE = re.compile(r"(?i)\b(it|they|them|he|she|him|her|this|these|those|there|stuff|things?)\b")
_TIMEISH = re.compile(
    r"(?i)\b(yesterday|today|tomorrow|tonight|last|next|ago|since|(?:jan|feb|mar|apr|may|jun|"
    r"jul|aug|sep|oct|nov|dec)\w*|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"weekend|\d+)\b"
)
_STATEMENT = re.compile(
    r"(?i)^(?:(?:last|this|next) (?:week|weekend|month|year|night|summer|fall|winter|spring|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|yesterday|today|recently|"
    r"lately|(?:a few|two|three|a couple of) (?:days|weeks|months) ago),?\s+(?=I\b|I'|My\b)"
    r"|^(?=I\b|I'|My\b)"
)


def speakers_of(transcript: Transcript) -> list[tuple[Line, str, bool]]:
    """(line, speaker, is the user) for each message a person said: the user's lines and
    those of other named participants (an assistant line without a name is not a person's)."""
    user = transcript.user_name or "User"
    out = []
    for ln in transcript.lines:
        if ln.kind != "message":
            continue
        if ln.role == "user":
            out.append((ln, clip(ln.speaker or user, 60), True))
        elif ln.speaker and ln.speaker not in (ASSISTANT, "Tool"):
            out.append((ln, clip(ln.speaker, 60), ln.speaker == user))
    return out


def extract_facts(transcript: Transcript) -> list[FactCandidate]:
    """Statements about named people, most confident first, at most 5 (3 per person).

    Each person's own first-person sentences are rewritten in the third person
    ("I ran a charity race last Saturday" -> "Melanie ran a charity race last
    Saturday"); questions, greetings, reactions ("I'm so proud of you") and
    sentences about "you" or "we" are never facts. Every candidate is labelled
    ``heuristic`` in ``source`` and carries its sentence as ``source_context``."""
    found: list[FactCandidate] = []
    seen: set[str] = set()
    names = participants(transcript)
    for ln, speaker, is_user in speakers_of(transcript):
        for raw in _sentences(ln):
            if "?" in raw:
                continue
            s = _strip_interjections(raw, names)
            if not s or _GREETING.match(s):
                continue
            candidates = _facts_in(s, speaker)
            if not candidates:
                statement = _statement(s, speaker)
                candidates = [statement] if statement else []
            for fact in candidates:
                if fact.about == "person" and not is_user:
                    continue  # "my wife" of another participant is not one of the user's people
                if not is_user:
                    fact = fact.model_copy(update={"subject": speaker, "about": "person"})
                key = fact.content.lower()
                if (
                    key in seen
                    or not is_statement(fact.content)
                    or not whole(fact.content)
                    or speaker not in fact.content
                ):
                    continue  # a statement about a named person, that person being named
                seen.add(key)
                found.append(fact)
    found.sort(key=lambda f: -(f.confidence or 0))
    per: Counter[str] = Counter()
    out: list[FactCandidate] = []
    # room for each person when several speak: at most 3 of the 5 about one of them
    cap = MAX_FACTS_PER_SPEAKER if len({f.subject for f in found}) > 1 else MAX_FACTS
    for fact in found:
        if per[fact.subject] < cap and len(out) < MAX_FACTS:
            per[fact.subject] += 1
            out.append(fact)
    return out


def is_statement(content: str) -> bool:
    """A statement about named people that stands alone: no question, greeting or
    unresolved I/you/we, and no "it", "they", "this", "she", "there" ... whose thing,
    person or place was said before ("Joanna is a huge fan of it")."""
    return not (
        "?" in content
        or "…" in content
        or "[" in content
        or _GREETING.match(content)
        or _FIRST_LEFT.search(content)
        or _SECOND_OR_PLURAL.search(content)
        or _VAGUE.search(content)
    )


_TAIL = re.compile(
    r"\s[-–—]+\s|;\s|,\s(?:but|so|which|and it|because|since)\s|\s(?:and it|but it|and that)\s"
)


def _main_clause(s: str) -> str:
    """The sentence up to a trailing remark ("... last Saturday - it was rewarding")."""
    m = _TAIL.search(s)
    if m and len(s[: m.start()].split()) >= 5:
        return s[: m.start()]
    return s


def _statement(s: str, name: str) -> FactCandidate | None:
    """A first-person sentence of ``name`` about themself, in the third person."""
    s = _main_clause(s)
    n = len(s.split())
    if n < 5 or n > FACT_WORDS or not _STATEMENT.match(s) or _REACTION.search(s):
        return None
    if _SECOND_OR_PLURAL.search(s):
        return None
    cw = [w for w in content_words(s) if w not in NOT_TOPICS]
    if len(cw) < 2:
        return None
    text = third_person(s.rstrip(" ,;:-!."), name)
    named = sum(
        1
        for i, tok in enumerate(_WORD.findall(s))
        if i > 0 and tok[:1].isupper() and tok not in ("I", "I'm", "I've", "I'll", "I'd")
    )
    confidence = 0.6
    confidence += 0.05 * min(named, 2)
    confidence += 0.05 if _TIMEISH.search(s) else 0.0
    confidence += 0.05 if len(cw) >= 4 else 0.0
    confidence -= 0.15 if _HEDGE.search(s) else 0.0
    return _fact(
        name,
        text,
        category="person",
        confidence=round(min(confidence, 0.8), 2),
        source="heuristic",
        sentence=s,
    )


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

    m = re.search(r"(?i)^(?:please )?remember (?:that )?(.+)", s)
    if m:
        body = _clause(m.group(1), 24)
        if len(content_words(body)) >= 2:
            out.append(
                _fact(
                    name,
                    third_person(body, name),
                    category="other",
                    confidence=CONF_EXPLICIT,
                    source="heuristic",
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
                source="heuristic",
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
                source="heuristic",
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
                    source="heuristic",
                    sentence=s,
                    about="person",
                )
            )
            return out

    m = re.search(r"(?i)\bmy ((?:[\w-]+\s){0,3}?[\w-]+) (is|are) (.+)", s)
    if m and m.group(1).split()[-1].lower() not in RELATIONS:
        thing, be, value = m.group(1), m.group(2).lower(), _clause(m.group(3))
        if value and len(words(value)) <= 12:
            fav = any(w in thing.lower() for w in ("favorite", "favourite", "preferred"))
            out.append(
                _fact(
                    name,
                    f"{name}'s {thing} {be} {value}",
                    category="preference" if fav else "other",
                    confidence=CONF_HEDGED if hedged else CONF_STATEMENT,
                    source="heuristic",
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
        if _RELATIVE_BEFORE.search(s[: m.start()]) or _NO_OBJECT.match(obj):
            continue  # "pottery, which I use for peace": its object is said before it
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
                source="heuristic",
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
                    source="heuristic",
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
                    source="heuristic",
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


MAX_OBSERVED = 5
"""An offline observation states at most this many of its cluster's statements."""


def observation(statements: Sequence[str]) -> str:
    """The offline observation of a cluster (no model): its statements, most
    representative first (the caller's order), each whole and ended with a full stop,
    the same wording (case, spacing, end punctuation ignored) once, at most
    :data:`MAX_OBSERVED` of them."""
    seen: set[str] = set()
    out: list[str] = []
    for s in statements:
        text = " ".join(s.split()).rstrip(" .;,:")
        key = text.lower()
        if not text or key in seen:
            continue
        seen.add(key)
        out.append(text[0].upper() + text[1:] + ("" if text.endswith(("!", "?")) else "."))
        if len(out) == MAX_OBSERVED:
            break
    return " ".join(out)
