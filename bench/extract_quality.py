"""What the extractor learns, measured against LoCoMo's references (CC BY-NC, not copied).

Each LoCoMo conversation is one engram user (``locomo-<sample_id>``; speaker A
is the user, speaker B the other participant with their display name). Its
turns go through ingest's use case (:func:`services.ingest.service.store_turns`,
one episode per session) into a fresh embedded PostgreSQL; every episode is
then extracted with the extractor's use case
(:func:`services.extractor.service.extract_episode`, offline extractor, the
real local embedding model for fact dedupe and supersession). The stack's
processes and Redis consumers are not run: the use cases are called directly.

Measures (all embeddings: the local all-MiniLM-L6-v2, cosine):

- fact precision: share of stored facts whose best match among the reference
  observations of the same session *and the speaker the fact names* has
  similarity >= ``MATCH`` (0.65, fixed before measuring);
- observation recall: share of reference observations matched (>= ``MATCH``)
  by a stored fact of the same session naming the same speaker;
- speaker attribution: among facts matching an observation of either speaker,
  the share that name that observation's speaker;
- summary similarity: cosine and ROUGE-L F1 between the episode summary's
  prose and the session's ``session_summary``;
- titles equal to the session's first line (the title is a prefix of it);
- facts that are questions, greetings or hold an unresolved I/me/my/you/your;
- QA evidence: share of questions (with evidence) one of whose evidence turns
  is the source turn of a stored fact (``source_message_id``, else the turn
  whose text holds the fact's ``source_context``).

The annotations are only read here, never given to the system under test.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import redis.asyncio as aioredis

from bench.common import Progress, bench_stack
from services.extractor.service import Extraction, extract_episode
from services.ingest.service import store_turns
from shared.db import create_pool
from shared.embeddings.local import LocalEmbedder
from shared.events import ExtractRequested, TurnReceived
from shared.llm import offline
from shared.llm.offline import OfflineExtractor
from shared.llm.transcript import Line, Transcript
from shared.settings import CommonSettings
from shared.streams import Publisher

MATCH = 0.65
MIN_TURNS = 3  # a session with fewer turns is not "substantive" (Nous F010.1)
_GREETING = re.compile(
    r"(?i)^\s*(hi|hello|hey|hiya|yo|good (morning|afternoon|evening)|thanks|thank you|wow|"
    r"woohoo|long time|congrat|bye|see you|take care)\b"
)
_FIRST_SECOND = re.compile(
    r"\b(I|I'm|I've|I'll|I'd)\b|(?i:\b(me|my|mine|myself|you|your|yours"
    r"|you're|you've|yourself)\b)"
)


@dataclass
class Session:
    key: str
    when: datetime
    turns: list[dict[str, Any]]
    summary: str
    observations: dict[str, list[tuple[str, list[str]]]]


@dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session] = field(default_factory=list)
    questions: list[list[str]] = field(default_factory=list)  # evidence ids per question

    @property
    def user_id(self) -> str:
        return f"locomo-{self.sample_id}"


def _when(text: str) -> datetime:
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _ids(raw: Any) -> list[str]:
    out = []
    for item in raw if isinstance(raw, list) else [raw]:
        for part in re.split(r"[;,]\s*|\s+", str(item)):
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if m:
                out.append(f"D{m.group(1)}:{m.group(2)}")
    return out


def load(path: Path, limit: int | None = None) -> list[Conversation]:
    data = sorted(json.loads(path.read_text()), key=lambda s: s["sample_id"])
    convs = []
    for sample in data[:limit]:
        c = sample["conversation"]
        conv = Conversation(sample["sample_id"], c["speaker_a"], c["speaker_b"])
        keys = sorted(
            (k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])
        )
        for key in keys:
            if not c[key]:
                continue
            obs = sample["observation"].get(f"{key}_observation", {})
            conv.sessions.append(
                Session(
                    key=key,
                    when=_when(c[f"{key}_date_time"]),
                    turns=c[key],
                    summary=sample["session_summary"].get(f"{key}_summary", ""),
                    observations={
                        who: [(text, _ids(ev)) for text, ev in items] for who, items in obs.items()
                    },
                )
            )
        conv.questions = [ids for qa in sample["qa"] if (ids := _ids(qa.get("evidence", [])))]
        convs.append(conv)
    return convs


def turn_events(conv: Conversation) -> list[TurnReceived]:
    out = []
    for s in conv.sessions:
        for i, t in enumerate(s.turns):
            text = t["text"]
            if t.get("blip_caption"):
                text = f"{text} [shares an image: {t['blip_caption']}]"
            out.append(
                TurnReceived(
                    occurred_at=s.when + timedelta(seconds=i),
                    user_id=conv.user_id,
                    display_name=t["speaker"],
                    provider="locomo",
                    chat_id=conv.sample_id,
                    role="user" if t["speaker"] == conv.speaker_a else "assistant",
                    content=text,
                    external_message_id=_ids(t["dia_id"])[0],
                )
            )
    return out


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 over lower-case word tokens (longest common subsequence)."""
    a = re.findall(r"[a-z0-9']+", candidate.lower())
    b = re.findall(r"[a-z0-9']+", reference.lower())
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def named_speaker(content: str, speakers: tuple[str, str]) -> str | None:
    """The conversation's speaker a fact is about: the first one it names."""
    found = [(m.start(), s) for s in speakers if (m := re.search(rf"\b{re.escape(s)}\b", content))]
    return min(found)[1] if found else None


def defective(content: str) -> str | None:
    """Why a stored fact is not a statement about a named person, if it is not."""
    if content.rstrip().endswith("?"):
        return "question"
    if _GREETING.search(content):
        return "greeting"
    if _FIRST_SECOND.search(re.sub(r'"[^"]*"', "", content)):
        return "unresolved I/you"
    return None


def learn(convs: list[Conversation]) -> tuple[list[dict[str, Any]], float]:
    """Ingest and extract every conversation; return one record per session and the time."""
    with bench_stack("extractq") as settings:
        return asyncio.run(_learn(settings, convs))


async def _learn(
    settings: CommonSettings, convs: list[Conversation]
) -> tuple[list[dict[str, Any]], float]:
    records: list[dict[str, Any]] = []
    embedder = LocalEmbedder()

    async def embedder_for(user_id: str) -> LocalEmbedder:
        return embedder

    assert settings.database_url and settings.redis_url
    pool = await create_pool(settings.database_url.get_secret_value(), max_size=4)
    redis = aioredis.from_url(settings.redis_url.get_secret_value())
    publisher = Publisher(redis, settings)
    x = Extraction(
        pool=pool,
        publisher=publisher,
        extractor=OfflineExtractor(),
        embedder_for=embedder_for,
        dim=settings.embedding_dim,
    )
    total = sum(len(c.sessions) for c in convs)
    progress = Progress("extract (ingest + extract_episode, offline)", total)
    done = 0
    t0 = time.perf_counter()
    try:
        for conv in convs:
            events = turn_events(conv)
            stored = await store_turns(pool, publisher, events, stale_window=timedelta(minutes=30))
            assert not stored.refused, stored.refused
            episodes = await pool.fetch(
                "SELECT id FROM episodes WHERE user_id = $1 ORDER BY started_at",
                conv.user_id,
            )
            assert len(episodes) == len(conv.sessions), (conv.sample_id, len(episodes))
            for ep in episodes:
                await extract_episode(
                    x,
                    ExtractRequested(episode_id=ep["id"], user_id=conv.user_id, reason="manual"),
                )
                done += 1
                progress.update(done)
            for ep, session in zip(episodes, conv.sessions, strict=True):
                records.append(await _record(pool, conv, session, ep["id"]))
        progress.update(done, force=True)
    finally:
        await redis.aclose()
        await pool.close()
    return records, time.perf_counter() - t0


async def _record(
    pool: asyncpg.Pool, conv: Conversation, session: Session, episode_id: uuid.UUID
) -> dict[str, Any]:
    ep = await pool.fetchrow("SELECT summary FROM episodes WHERE id = $1", episode_id)
    facts = await pool.fetch(
        """SELECT f.content, f.source, f.source_context, f.superseded_at IS NOT NULL AS superseded,
                  m.external_id AS source_turn, f.data
           FROM memory_items f LEFT JOIN messages m ON m.id = f.source_message_id
           WHERE f.user_id = $1 AND f.episode_id = $2 AND f.type IN ('fact', 'preference')
           ORDER BY f.created_at""",
        conv.user_id,
        episode_id,
    )
    reviews = await pool.fetchval(
        "SELECT count(*) FROM fact_reviews WHERE user_id = $1 AND episode_id = $2",
        conv.user_id,
        episode_id,
    )
    out = []
    for f in facts:
        turn = f["source_turn"]
        if turn is None and f["source_context"]:
            ctx = _norm(f["source_context"])
            turn = next(
                (_ids(t["dia_id"])[0] for t in session.turns if ctx and ctx in _norm(t["text"])),
                None,
            )
        out.append(
            {
                "content": f["content"],
                "source": f["source"],
                "superseded": f["superseded"],
                "source_turn": turn,
            }
        )
    summary = ep["summary"] or {}
    return {
        "conversation": conv.sample_id,
        "session": session.key,
        "speakers": [conv.speaker_a, conv.speaker_b],
        "turns": len(session.turns),
        "first_line": session.turns[0]["text"],
        "title": summary.get("title", ""),
        "summary": summary.get("summary", ""),
        "topics": summary.get("topics", []),
        "reference_summary": session.summary,
        "observations": {k: [t for t, _ in v] for k, v in session.observations.items()},
        "facts": out,
        "reviews": int(reviews or 0),
    }


def _unit(vectors: list[list[float]]) -> np.ndarray:
    m = np.asarray(vectors, dtype=np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-9)


async def score(records: list[dict[str, Any]], convs: list[Conversation]) -> dict[str, Any]:
    embedder = LocalEmbedder()
    texts: dict[str, int] = {}

    def add(t: str) -> None:
        texts.setdefault(t, len(texts))

    for r in records:
        add(r["summary"] or " ")
        add(r["reference_summary"] or " ")
        for f in r["facts"]:
            add(f["content"])
        for obs in r["observations"].values():
            for o in obs:
                add(o)
    print(f"  scoring: embedding {len(texts):,} texts with the local model", file=sys.stderr)
    vecs = _unit(await embedder.embed(list(texts)))

    def sim(a: str, b: str) -> float:
        return float(vecs[texts[a]] @ vecs[texts[b]])

    facts = matched = attributed = attributed_ok = 0
    obs_total = obs_hit = 0
    useful_sessions = substantive = 0
    defects: dict[str, int] = defaultdict(int)
    defect_examples: list[str] = []
    superseded = reviews = 0
    title_first = titles = 0
    cosines: list[float] = []
    rouges: list[float] = []
    sources: dict[str, set[str]] = defaultdict(set)
    by_source: dict[str, int] = defaultdict(int)
    precision_at: dict[float, int] = {0.5: 0, 0.65: 0, 0.8: 0}
    for r in records:
        speakers = (r["speakers"][0], r["speakers"][1])
        obs = r["observations"]
        useful = False
        hit: set[tuple[str, int]] = set()
        for f in r["facts"]:
            facts += 1
            by_source[f["source"] or "none"] += 1
            superseded += f["superseded"]
            if f["source_turn"]:
                sources[r["conversation"]].add(f["source_turn"])
            why = defective(f["content"])
            if why:
                defects[why] += 1
                if len(defect_examples) < 12:
                    defect_examples.append(f"{why}: {f['content']}")
            who = named_speaker(f["content"], speakers)
            best_any: tuple[float, str | None] = (0.0, None)
            for speaker, items in obs.items():
                for o in items:
                    s = sim(f["content"], o)
                    if s > best_any[0]:
                        best_any = (s, speaker)
            if best_any[0] >= MATCH:
                attributed += 1
                attributed_ok += who == best_any[1]
            own = [(sim(f["content"], o), i) for i, o in enumerate(obs.get(who or "", []))]
            best_own = max(own, default=(0.0, -1))
            for t in precision_at:
                precision_at[t] += best_own[0] >= t
            if best_own[0] >= MATCH:
                matched += 1
                useful = True
            for s, i in own:
                if s >= MATCH:
                    hit.add((who or "", i))
        for speaker, items in obs.items():
            obs_total += len(items)
            obs_hit += sum((speaker, i) in hit for i in range(len(items)))
        if r["turns"] >= MIN_TURNS:
            substantive += 1
            useful_sessions += useful
        reviews += r["reviews"]
        titles += 1
        t = _norm(r["title"].rstrip("…"))
        title_first += bool(t) and _norm(r["first_line"]).startswith(t)
        if r["reference_summary"]:
            cosines.append(sim(r["summary"] or " ", r["reference_summary"]))
            rouges.append(rouge_l(r["summary"], r["reference_summary"]))
    questions = answered = 0
    for conv in convs:
        for ids in conv.questions:
            questions += 1
            answered += any(i in sources[conv.sample_id] for i in ids)
    n = len(records)
    return {
        "sessions": n,
        "facts_stored": facts,
        "facts_per_session": round(facts / n, 2),
        "facts_superseded": superseded,
        "facts_held_for_review": reviews,
        "facts_by_source": dict(by_source),
        "match_similarity": MATCH,
        "fact_precision": round(matched / facts, 3) if facts else 0.0,
        "fact_precision_at": {
            str(t): round(v / facts, 3) if facts else 0.0 for t, v in precision_at.items()
        },
        "observation_recall": round(obs_hit / obs_total, 3) if obs_total else 0.0,
        "speaker_attribution": round(attributed_ok / attributed, 3) if attributed else 0.0,
        "facts_matching_any_observation": attributed,
        "sessions_with_a_useful_fact": f"{useful_sessions}/{substantive}",
        "useful_session_share": round(useful_sessions / substantive, 3) if substantive else 0.0,
        "defective_facts": dict(defects),
        "defective_examples": defect_examples,
        "summary_cosine_mean": round(float(np.mean(cosines)), 3) if cosines else 0.0,
        "summary_rouge_l_mean": round(float(np.mean(rouges)), 3) if rouges else 0.0,
        "titles_equal_to_first_line": f"{title_first}/{titles}",
        "qa_questions": questions,
        "qa_evidence_is_a_fact_source": round(answered / questions, 4) if questions else 0.0,
    }


QUALITY_ROWS = [
    ("fact precision (same session+speaker, cos >= 0.65)", "fact_precision"),
    ("observation recall", "observation_recall"),
    ("speaker attribution", "speaker_attribution"),
    ("sessions with >= 1 useful fact", "sessions_with_a_useful_fact"),
    ("facts stored / session", "facts_per_session"),
    ("facts superseded", "facts_superseded"),
    ("facts held for review", "facts_held_for_review"),
    ("defective facts (question/greeting/I-you)", "defective_facts"),
    ("summary cosine to session_summary", "summary_cosine_mean"),
    ("summary ROUGE-L F1", "summary_rouge_l_mean"),
    ("titles equal to the first line", "titles_equal_to_first_line"),
    ("QA evidence turn is a fact's source", "qa_evidence_is_a_fact_source"),
]


# --- Statements a person would sign (issue 31.3) ---------------------------------------
#
#     python -m bench.extract_quality [locomo10.json]
#
# The offline extractor's own output, session by session (``summarize`` and
# ``extract_facts`` on the session's transcript: no database, no fact review or dedupe),
# scored on both halves (sample_ids sorted: the first five, the last five):
#
# - truncations: facts, summary sentences and key points cut short: holding "…", ending on
#   a word that needs a continuation (:data:`DANGLING`: an article, a possessive, a
#   conjunction, "a few"), or a verb of liking or use that lost its object before a
#   preposition ("uses for ...");
# - attribution errors on a labelled sample: the first 100 facts of each half (in
#   conversation and session order) whose text matches one of the session's reference
#   observations (cosine >= MATCH with the local model), the label being the speaker that
#   LoCoMo's annotators filed that observation under; an error is a fact naming the other
#   speaker first (or neither). Summary sentences whose subject joins both speakers
#   ("A and B ...", the first sentence, which says who talked, left out) are counted too:
#   in LoCoMo's sessions "we" is almost never the two speakers together (a speaker's
#   family, friends, team);
# - precision: share of facts whose best same-session observation *of the speaker the fact
#   names* has cosine >= MATCH (0.65, as above).

DANGLING = frozenset(
    """a an the my his their our your its and or but nor few several very than because
    whose""".split()
)
"""Words no whole English sentence ends on (a stranded preposition, "that", "is" can)."""
_LOST_OBJECT = re.compile(
    r"(?i)\b(?:uses|likes|loves|enjoys|prefers|hates|dislikes)\s+"
    r"(?:for|with|in|at|on|from|by|because)\b"
)
_SENTENCE = re.compile(r"(?<=[.!?…])\s+(?=[A-Z])")


def truncated(text: str) -> str | None:
    """Why ``text`` reads as cut short, if it does (the rules above)."""
    t = text.strip()
    if "…" in t or t.endswith("..."):
        return "ellipsis"
    last = re.findall(r"[A-Za-z']+", t)
    if last and last[-1].lower() in DANGLING:
        return "dangling word"
    for m in _LOST_OBJECT.finditer(t):
        # "pottery, which Melanie uses for peace" is whole: the object comes before
        if not re.search(r"(?i)\b(?:which|that|what|who|whom|where)\s+[\w']+\s+$", t[: m.start()]):
            return "lost object"
    return None


def both_speakers(sentence: str, speakers: tuple[str, str]) -> bool:
    a, b = (re.escape(s) for s in speakers)
    return bool(re.match(rf"(?:{a} and {b}|{b} and {a})\b", sentence.strip()))


def _transcript(conv: Conversation, session: Session) -> Transcript:
    lines = []
    for t in session.turns:
        text = t["text"]
        if t.get("blip_caption"):
            text = f"{text} [shares an image: {t['blip_caption']}]"
        role = "user" if t["speaker"] == conv.speaker_a else "assistant"
        lines.append(Line(role=role, speaker=t["speaker"], text=text))
    return Transcript(lines=lines, user_name=conv.speaker_a)


def direct(convs: list[Conversation]) -> list[dict[str, Any]]:
    """The offline extractor's summary and facts of every session (no database)."""
    out = []
    for conv in convs:
        for session in conv.sessions:
            tr = _transcript(conv, session)
            summary = offline.summarize(tr)
            facts = offline.extract_facts(tr)
            out.append(
                {
                    "conversation": conv.sample_id,
                    "session": session.key,
                    "speakers": [conv.speaker_a, conv.speaker_b],
                    "summary": summary.summary,
                    "key_points": summary.key_points,
                    "facts": [f.content for f in facts],
                    "observations": {k: [t for t, _ in v] for k, v in session.observations.items()},
                }
            )
    return out


async def score_signed(records: list[dict[str, Any]], sample: int = 100) -> dict[str, Any]:
    """Truncations, attribution errors on the labelled sample, precision (rules above)."""
    embedder = LocalEmbedder()
    texts: dict[str, int] = {}
    for r in records:
        for t in r["facts"] + [o for obs in r["observations"].values() for o in obs]:
            texts.setdefault(t, len(texts))
    vecs = _unit(await embedder.embed(list(texts))) if texts else np.zeros((0, 384))

    def sim(a: str, b: str) -> float:
        return float(vecs[texts[a]] @ vecs[texts[b]])

    facts = precise = 0
    cut: dict[str, int] = defaultdict(int)
    examples: list[str] = []
    labelled = errors = 0
    error_examples: list[str] = []
    summary_sentences = joint = 0
    for r in records:
        speakers = (r["speakers"][0], r["speakers"][1])
        for kind, items in (
            ("fact", r["facts"]),
            ("summary sentence", _SENTENCE.split(r["summary"])),
            ("key point", r["key_points"]),
        ):
            for text in items:
                why = truncated(text)
                if why:
                    cut[kind] += 1
                    if len(examples) < 10:
                        examples.append(f"{kind} ({why}): {text}")
        for s in _SENTENCE.split(r["summary"])[1:]:  # the first says who talked: both did
            summary_sentences += 1
            joint += both_speakers(s, speakers)
        for f in r["facts"]:
            facts += 1
            who = named_speaker(f, speakers)
            own = [sim(f, o) for o in r["observations"].get(who or "", [])]
            precise += max(own, default=0.0) >= MATCH
            best = max(
                ((sim(f, o), spk) for spk, obs in r["observations"].items() for o in obs),
                default=(0.0, None),
            )
            if best[0] >= MATCH and labelled < sample:
                labelled += 1
                if who != best[1]:
                    errors += 1
                    if len(error_examples) < 5:
                        error_examples.append(f"{f} (label: {best[1]})")
    return {
        "sessions": len(records),
        "facts": facts,
        "truncated": dict(cut),
        "truncated_total": sum(cut.values()),
        "truncated_examples": examples,
        "labelled_sample": labelled,
        "attribution_errors": errors,
        "attribution_error_rate": round(errors / labelled, 3) if labelled else 0.0,
        "attribution_error_examples": error_examples,
        "summary_sentences": summary_sentences,
        "summary_sentences_joining_both_speakers": joint,
        "fact_precision": round(precise / facts, 3) if facts else 0.0,
    }


def signed(path: Path) -> dict[str, Any]:
    convs = load(path)
    halves = {"first five": convs[:5], "last five": convs[5:]}
    out: dict[str, Any] = {}
    for name, part in halves.items():
        t0 = time.perf_counter()
        records = direct(part)
        out[name] = asyncio.run(score_signed(records))
        out[name]["conversations"] = [c.sample_id for c in part]
        out[name]["seconds"] = round(time.perf_counter() - t0, 1)
    return out


SIGNED_ROWS = [
    ("truncated (facts + summary sentences + key points)", "truncated_total"),
    ("attribution errors / labelled sample", "attribution_errors"),
    ("summary sentences joining both speakers", "summary_sentences_joining_both_speakers"),
    ("fact precision (same session+speaker, cos >= 0.65)", "fact_precision"),
    ("facts", "facts"),
]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Statements a person would sign (LoCoMo)")
    parser.add_argument(
        "locomo", type=Path, nargs="?", default=Path("../shared/data/locomo/locomo10.json")
    )
    parser.add_argument("--out", type=Path, default=None, help="write the results (JSON) here")
    args = parser.parse_args()
    result = signed(args.locomo)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'measure':<54}{'first five':>12}{'last five':>12}")
    for label, key in SIGNED_ROWS:
        a, b = result["first five"], result["last five"]
        extra = (
            (f" /{a['labelled_sample']}", f" /{b['labelled_sample']}")
            if key == "attribution_errors"
            else ("", "")
        )
        print(f"{label:<54}{str(a[key]) + extra[0]:>12}{str(b[key]) + extra[1]:>12}")
    for name in ("first five", "last five"):
        for e in (
            result[name]["truncated_examples"][:5] + result[name]["attribution_error_examples"][:3]
        ):
            print(f"  {name}: {e}")


if __name__ == "__main__":
    main()
