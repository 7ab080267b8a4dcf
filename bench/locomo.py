"""LoCoMo retrieval through the real pipeline: Redis → ingest → embedder → query API.

    python -m bench.locomo [PATH/TO/locomo10.json] [--modes fts,semantic,hybrid,rrf]
    make bench-locomo LOCOMO=path

For each of the 10 conversations (one engram user each, ``locomo-<sample_id>``):
every turn is published on ``turns`` as a TurnReceived (speaker as display name,
the session's date as its time — plus the turn's index in seconds, so turns keep
their order —, a shared image's caption after the text, ``dia_id`` as the
external message id); the bench waits until every turn is embedded, then asks
every question through ``POST /v1/messages/search`` with that user's API key and
scores the returned turns against the question's evidence ids.

The system never sees the dataset's annotations (observation, session and event
summaries), the answers or the evidence. The data is CC BY-NC: it is read from
its path, never copied into the repository.

It uses the stack of ``make run`` when one is running (``<data_dir>/stack.json``;
ports from the same ``ENGRAM_*`` settings), else starts its own servers and
services in a temporary directory. ``--reuse`` keeps already-loaded users (to
iterate on retrieval without re-ingesting); by default they are deleted and
loaded afresh, which is what the ingest+embed time measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import redis.asyncio as aioredis

from bench.common import Progress, bench_stack, table, write_result
from engram_cli.embedded import with_running_stack
from shared.apikeys import create_key
from shared.db import create_pool
from shared.embeddings import vector_index
from shared.errors import ConfigError
from shared.events import TurnReceived
from shared.settings import CommonSettings
from shared.streams import Publisher

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATH = ROOT / ".." / "shared" / "data" / "locomo" / "locomo10.json"
KS = (5, 10, 25, 50)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# Turn-level, categories 1-5 (docs/retrieval.md, the data's README). The dense
# baseline counts a question found when any evidence turn is in the top 10 (hit@10:
# the bare model on '<speaker>: <text>' gives hit@10 0.469 but R@10 0.421); the
# BM25 and hybrid ones come from the same harness.
REFERENCES = [
    ("BM25 (reference)", {"hit@10": 0.528}),
    ("all-MiniLM-L6-v2 dense (reference)", {"hit@10": 0.466}),
    ("0.7/0.3 min-max hybrid (reference)", {"hit@10": 0.596}),
    ("DRAGON, LoCoMo paper Table 3", {"r@5": 0.567, "r@10": 0.662, "r@25": 0.767, "r@50": 0.827}),
]


CAPTION = "[shares an image: "


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    when: datetime


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    form: str = "plain"  # or "bursts" (see ``bursts``), or "one" (see ``one_user``)
    dataset: str = "locomo"  # or "beam" (bench/beam.py)

    @property
    def user_id(self) -> str:
        if self.form == "one":
            return ONE_USER if self.dataset == "locomo" else f"{self.dataset}-one"
        return (
            f"{self.dataset}-{self.sample_id}"
            if self.form == "plain"
            else f"{self.dataset}-{self.form}-{self.sample_id}"
        )


ONE_USER = "locomo-one"


@dataclass(frozen=True)
class Dataset:
    """A tuning set the benches read: its loader, its categories, and the groups of
    categories reported beside them (``headline``: the one compared across changes)."""

    name: str
    categories: dict[int, str]
    groups: dict[str, frozenset[int]]
    headline: str

    def load(self, path: Path) -> list[Conversation]:
        if self.name == "beam":
            from bench import beam

            convs: list[Conversation] = beam.load(path)
            return convs
        return load(path)

    def label(self, group: str) -> str:
        if group in self.groups:
            return group
        return f"{group} {self.categories[int(group)]}"


LOCOMO = Dataset(
    "locomo", CATEGORIES, {"1-5": frozenset(range(1, 6)), "1-4": frozenset(range(1, 5))}, "1-4"
)


def beam_dataset() -> Dataset:
    from bench import beam

    answerable = frozenset(n for n, c in beam.CATEGORIES.items() if c != "abstention")
    return Dataset("beam", beam.CATEGORIES, {"all": answerable}, "all")


def dataset(name: str) -> Dataset:
    if name == "beam":
        return beam_dataset()
    if name == "locomo":
        return LOCOMO
    raise ValueError(f"unknown dataset {name!r}: locomo or beam")


def one_user(conv: Conversation) -> Conversation:
    """The same conversation as one chat of a heavy user: all ten conversations are
    the chats (``chat_id`` = sample_id) of one engram user, 5,882 turns, past the
    5,000 at which a user's turns are searched through the HNSW index and BM25
    reads only the turns holding a query word (docs/retrieval.md, "BM25 at
    scale"). Each question is asked of that user; a turn of another conversation
    in the results counts as a miss, wherever its id matches."""
    return Conversation(
        conv.sample_id,
        conv.speaker_a,
        turns=conv.turns,
        questions=conv.questions,
        form="one",
        dataset=conv.dataset,
    )


# A sentence ends at ".", "!" or "?" (possibly repeated, or "?!") followed by space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
PIECE = "#"  # a piece's external id: ``<dia_id>#<n>``


def sentences(text: str) -> list[str]:
    return [p for p in _SENTENCE_END.split(text.strip()) if p]


def bursts(conv: Conversation) -> Conversation:
    """The same conversation as real chats tend to look: every turn split into its
    sentences, published as consecutive turns of the same speaker (a burst of short
    messages), a shared image's caption as a message of its own. The pieces of
    turn ``D1:3`` get the ids ``D1:3#0``, ``D1:3#1``, ...: an evidence turn counts as
    found in the top k when any of its pieces is among the top k pieces returned
    (the k are pieces, not turns: the agent still gets k messages). The questions
    are unchanged; each piece is one second after the last, as the turns are."""
    out = Conversation(
        conv.sample_id,
        conv.speaker_a,
        questions=conv.questions,
        form="bursts",
        dataset=conv.dataset,
    )
    session, step, start = "", 0, conv.turns[0].when if conv.turns else datetime.now(UTC)
    for t in conv.turns:
        text, caption = t.text, ""
        if CAPTION in text:
            text, caption = text.split(CAPTION, 1)
            caption = (CAPTION + caption).strip()
        parts = sentences(text) + ([caption] if caption else [])
        this = t.dia_id.split(":")[0]
        if this != session:
            session, step = this, 0
            start = t.when
        for i, part in enumerate(parts or [t.text]):
            out.turns.append(
                Turn(f"{t.dia_id}{PIECE}{i}", t.speaker, part, start + timedelta(seconds=step))
            )
            step += 1
    return out


def turn_of(external_id: str) -> str:
    """The LoCoMo turn a returned message is (or is a piece of)."""
    return external_id.split(PIECE, 1)[0]


def _session_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _evidence_ids(raw: list[str]) -> frozenset[str]:
    """The README's quirks: several ids in one string, ``D:11:26``, ``D30:05``."""
    out = set()
    for item in raw:
        for part in re.split(r"[;,]\s*|\s+", item):
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if m:
                out.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return frozenset(out)


def load(path: Path) -> list[Conversation]:
    convs = []
    for sample in json.loads(path.read_text()):
        c = sample["conversation"]
        conv = Conversation(sample["sample_id"], c["speaker_a"])
        keys = sorted(
            (k for k in c if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1])
        )
        for key in keys:
            start = _session_time(c[f"{key}_date_time"])
            for i, t in enumerate(c[key]):
                text = t["text"]
                if t.get("blip_caption"):
                    text = f"{text} {CAPTION}{t['blip_caption']}]"
                conv.turns.append(
                    Turn(t["dia_id"], t["speaker"], text, start + timedelta(seconds=i))
                )
        for qa in sample["qa"]:
            evidence = _evidence_ids(qa.get("evidence", []))
            if evidence:
                conv.questions.append(Question(qa["question"], int(qa["category"]), evidence))
        convs.append(conv)
    return convs


def turn_events(conv: Conversation) -> list[TurnReceived]:
    return [
        TurnReceived(
            occurred_at=t.when,
            user_id=conv.user_id,
            display_name=t.speaker,
            provider=conv.dataset,
            chat_id=conv.sample_id,
            role="user" if t.speaker == conv.speaker_a else "assistant",
            content=t.text,
            external_message_id=t.dia_id,
        )
        for t in conv.turns
    ]


# -- the stack ----------------------------------------------------------------------


def _service_env(settings: CommonSettings) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in settings.model_dump(mode="json").items():
        if value is not None:
            env[f"ENGRAM_{key.upper()}"] = str(value)
    assert settings.database_url and settings.redis_url
    env["ENGRAM_DATABASE_URL"] = settings.database_url.get_secret_value()
    env["ENGRAM_REDIS_URL"] = settings.redis_url.get_secret_value()
    return env


@contextlib.contextmanager
def services(settings: CommonSettings, names: list[str]) -> Iterator[None]:
    """Run ``services.<name>`` as processes on the settings' ports until the block ends."""
    procs = {
        n: subprocess.Popen(
            [sys.executable, "-m", f"services.{n}"], env=_service_env(settings), cwd=ROOT
        )
        for n in names
    }
    try:
        deadline = time.monotonic() + 180
        waiting = set(names)
        while waiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"services not healthy in 180 s: {sorted(waiting)}")
            for n in list(waiting):
                if procs[n].poll() is not None:
                    raise RuntimeError(f"service {n} exited with {procs[n].returncode}")
                port = getattr(settings, f"{n}_port")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        waiting.discard(n)
            time.sleep(0.3)
        yield
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


@contextlib.contextmanager
def stack(
    names: tuple[str, ...] = ("ingest", "embedder", "query"),
) -> Iterator[tuple[CommonSettings, str]]:
    """The running ``make run`` stack if there is one, else a private one running
    the services ``names``."""
    try:
        settings = with_running_stack(CommonSettings())
    except ConfigError:
        settings = None
    if settings is not None:
        yield settings, "running stack (make run)"
        return
    with bench_stack("locomo") as s, services(s, list(names)):
        yield s, "private stack (bench_stack, services as processes)"


# -- loading ------------------------------------------------------------------------

COUNTS = """
SELECT count(*) AS total, count(*) FILTER (WHERE embedding_state = 'ready') AS ready,
       count(*) FILTER (WHERE embedding_state = 'error') AS errors
FROM messages WHERE user_id = ANY($1::text[])
"""


async def load_turns(
    pool: asyncpg.Pool, settings: CommonSettings, convs: list[Conversation], *, reuse: bool
) -> dict[str, Any]:
    users = [c.user_id for c in convs]
    expected = sum(len(c.turns) for c in convs)
    row = await pool.fetchrow(COUNTS, users)
    if reuse and row["ready"] == expected:
        print(f"reusing {expected:,} embedded turns of {len(users)} users", file=sys.stderr)
        return {"reused": True, "turns": expected}
    await pool.execute("DELETE FROM users WHERE id = ANY($1::text[])", users)
    assert settings.redis_url is not None
    redis = aioredis.from_url(settings.redis_url.get_secret_value())
    publisher = Publisher(redis, settings)
    started = time.perf_counter()
    try:
        for conv in convs:
            events = turn_events(conv)
            for i in range(0, len(events), 500):
                await publisher.publish("turns", events[i : i + 500])
    finally:
        await redis.aclose()
    published = time.perf_counter() - started
    progress = Progress("embedded turns", expected)
    stored_at = None
    while True:
        row = await pool.fetchrow(COUNTS, users)
        if stored_at is None and row["total"] >= expected:
            stored_at = time.perf_counter() - started
        progress.update(row["ready"] + row["errors"])
        if row["ready"] + row["errors"] >= expected:
            break
        if time.perf_counter() - started > 3600:
            raise RuntimeError(f"turns not embedded after an hour: {dict(row)}")
        await asyncio.sleep(0.5)
    total = time.perf_counter() - started
    progress.update(expected, force=True)
    return {
        "reused": False,
        "turns": expected,
        "errors": row["errors"],
        "publish_s": round(published, 2),
        "stored_s": round(stored_at or total, 2),
        "ingest_and_embed_s": round(total, 2),
        "turns_per_s": round(expected / total, 1),
    }


# -- asking and scoring -------------------------------------------------------------

# (half, category, scores, seconds) of one question
Row = tuple[str, int, dict[str, float], float]


def _ndcg(ranked: list[str], evidence: frozenset[str], k: int = 10) -> float:
    """Binary NDCG@k; an evidence turn counts at its first place only (in the burst
    form several of the returned pieces can be the same turn)."""
    first = {d: i for i, d in reversed(list(enumerate(ranked[:k])))}
    dcg = sum(1 / math.log2(i + 2) for d, i in first.items() if d in evidence)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(evidence), k)))
    return dcg / ideal


def score(ranked: list[str], evidence: frozenset[str]) -> dict[str, float]:
    """R@k: the share of the question's evidence turns in the top k (averaged over
    questions, what this bench calls recall); hit@10: whether any of them is in the
    top 10 (what the dense and BM25 reference figures count, docs/retrieval.md)."""
    out = {f"r@{k}": len(evidence & set(ranked[:k])) / len(evidence) for k in KS}
    out["hit@10"] = float(bool(evidence & set(ranked[:10])))
    out["ndcg@10"] = _ndcg(ranked, evidence)
    return out


async def ask_all(
    base_url: str,
    keys: dict[str, str],
    convs: list[Conversation],
    mode: str,
    half: dict[str, str],
    *,
    concurrency: int = 4,
) -> list[Row]:
    """Every question in ``mode``: (half, category, scores, seconds) each."""
    slots = asyncio.Semaphore(concurrency)
    work = [(c, q) for c in convs for q in c.questions]
    progress = Progress(f"questions ({mode})", len(work))
    done = 0

    async def one(client: httpx.AsyncClient, conv: Conversation, q: Question) -> Row:
        nonlocal done
        async with slots:
            t0 = time.perf_counter()
            r = await client.post(
                "/v1/messages/search",
                json={"query": q.text, "limit": max(KS), "mode": mode},
                headers={"Authorization": f"Bearer {keys[conv.user_id]}"},
            )
            elapsed = time.perf_counter() - t0
        r.raise_for_status()
        body = r.json()
        if body["mode"] != mode:
            raise RuntimeError(f"asked for {mode}, the service ran {body['mode']}")
        ranked = [
            turn_of(h["external_message_id"]) if h["chat_id"] == conv.sample_id else "-"
            for h in body["results"]
        ]
        done += 1
        progress.update(done)
        return half[conv.sample_id], q.category, score(ranked, q.evidence), elapsed

    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        out = await asyncio.gather(*(one(client, c, q) for c, q in work))
    progress.update(len(work), force=True)
    return list(out)


def halves(convs: list[Conversation]) -> dict[str, str]:
    """sample_id -> ``tune`` (the first half by sample_id: LoCoMo's first five) or
    ``check`` (the rest): the fixed split of docs/retrieval.md, taken over the whole
    file, so it is the same whichever conversations a run loads."""
    ids = sorted(c.sample_id for c in convs)
    return {sid: "tune" if i < (len(ids) + 1) // 2 else "check" for i, sid in enumerate(ids)}


def pick(convs: list[Conversation], n: int | None, half: dict[str, str]) -> list[Conversation]:
    """``n`` conversations taken evenly from both halves (all when ``n`` is None)."""
    if n is None or n >= len(convs):
        return convs
    tune = [c for c in convs if half[c.sample_id] == "tune"]
    check = [c for c in convs if half[c.sample_id] == "check"]
    return tune[: (n + 1) // 2] + check[: n // 2]


def _groups(rows: list[Row], ds: Dataset = LOCOMO) -> dict[str, Any]:
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for _, cat, s, _ in rows:
        groups[f"{cat}"].append(s)
        for name, members in ds.groups.items():
            if cat in members:
                groups[name].append(s)
    out: dict[str, Any] = {}
    for name, scores in sorted(groups.items()):
        out[name] = {m: round(sum(s[m] for s in scores) / len(scores), 4) for m in scores[0]}
        out[name]["n"] = len(scores)
    return out


def summarise(rows: list[Row], ds: Dataset = LOCOMO) -> dict[str, Any]:
    """Scores by category group over all questions, and the same for each half."""
    out = _groups(rows, ds)
    out["halves"] = {
        h: _groups([r for r in rows if r[0] == h], ds)
        for h in ("tune", "check")
        if any(r[0] == h for r in rows)
    }
    latencies = sorted(e for *_, e in rows)
    out["latency_ms"] = {
        "p50": round(latencies[len(latencies) // 2] * 1000, 1),
        "p95": round(latencies[int(len(latencies) * 0.95)] * 1000, 1),
    }
    return out


def _order(ds: Dataset) -> list[str]:
    return [*ds.groups, *(str(c) for c in sorted(ds.categories))]


def report(results: dict[str, dict[str, Any]], ds: Dataset = LOCOMO) -> str:
    metrics = [f"r@{k}" for k in KS] + ["hit@10", "ndcg@10"]
    rows: list[tuple[str, ...]] = []
    if ds is LOCOMO:
        for name, ref in REFERENCES:
            rows.append((name, "1-5", *(f"{ref[m]:.3f}" if m in ref else "" for m in metrics)))
    for mode, res in results.items():
        for group in _order(ds):
            if group not in res:
                continue
            rows.append(
                (f"engram {mode}", ds.label(group), *(f"{res[group][m]:.3f}" for m in metrics))
            )
    return table(rows, ("retriever", "categories", *metrics))


def report_halves(results: dict[str, dict[str, Any]], ds: Dataset = LOCOMO) -> str:
    """R@10 and nDCG@10 of every mode on the tuning half, the check half and all,
    for the groups of categories and each category."""
    rows: list[tuple[str, ...]] = []
    for mode, res in results.items():
        for group in _order(ds):
            if group not in res:
                continue
            cells = []
            for metric in ("r@10", "ndcg@10"):
                for part in (res["halves"].get("tune", {}), res["halves"].get("check", {}), res):
                    cells.append(f"{part[group][metric]:.3f}" if group in part else "")
            rows.append((f"engram {mode}", ds.label(group), *cells))
    header: tuple[str, ...] = ("retriever", "categories")
    header += ("r@10 tune", "r@10 check", "r@10 all", "ndcg tune", "ndcg check", "ndcg all")
    return table(rows, header)


async def indexed(pool: asyncpg.Pool, user_id: str) -> None:
    """Wait until the embedder has listed ``user_id``'s turns for the HNSW index (its
    indexer looks every minute), so the questions take a big user's path."""
    started = time.perf_counter()
    while not await vector_index.is_ready(pool, user_id, "message"):
        if time.perf_counter() - started > 600:
            raise RuntimeError(f"{user_id}'s turns not in the vector index after 10 minutes")
        print(f"  waiting for the embedder to index {user_id}'s turns ...", file=sys.stderr)
        await asyncio.sleep(5)


async def run(
    path: Path,
    modes: list[str],
    *,
    reuse: bool,
    conversations: int | None = None,
    forms: tuple[str, ...] = ("plain",),
    ds: Dataset = LOCOMO,
) -> dict[str, Any]:
    """Load and ask each form (``plain``: LoCoMo's turns; ``bursts``: each turn split
    into a burst of its sentences) as users of their own, in one stack; ``one``:
    every conversation a chat of one user."""
    every = ds.load(path)
    half = halves(every)
    plain = pick(every, conversations, half)
    by_form = {
        "plain": plain,
        "bursts": [bursts(c) for c in plain],
        "one": [one_user(c) for c in plain],
    }
    out: dict[str, Any] = {}
    with stack() as (settings, where):
        print(f"using the {where}", file=sys.stderr)
        assert settings.database_url is not None
        base = f"http://127.0.0.1:{settings.query_port}"
        for form in forms:
            convs = by_form[form]
            pool = await create_pool(settings.database_url.get_secret_value(), max_size=4)
            try:
                loading = await load_turns(pool, settings, convs, reuse=reuse)
                if form == "one":
                    await indexed(pool, convs[0].user_id)
                keys = {}
                for c in convs:
                    if c.user_id not in keys:
                        _, keys[c.user_id] = await create_key(pool, user_id=c.user_id)
            finally:
                await pool.close()
            results = {m: summarise(await ask_all(base, keys, convs, m, half), ds) for m in modes}
            out[form] = {
                "turns": sum(len(c.turns) for c in convs),
                "loading": loading,
                "results": results,
            }
    first = out[forms[0]]
    return {
        "dataset": str(path),
        "set": ds.name,
        "stack": where,
        "form": forms[0],
        "conversations": len(plain),
        "turns": first["turns"],
        "questions": sum(len(c.questions) for c in plain),
        "loading": first["loading"],
        "results": first["results"],
        "forms": out,
        "references": dict(REFERENCES),
        "note": "2-core machine shared with other engineers' work while measured",
    }


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """The data a bench reads: LoCoMo's file, or with ``--dataset beam`` BEAM's tier."""
    parser.add_argument(
        "locomo",
        type=Path,
        nargs="?",
        default=None,
        help="locomo10.json, or with --dataset beam BEAM's tier directory (chats/100K)",
    )
    parser.add_argument(
        "--dataset",
        choices=("locomo", "beam"),
        default="locomo",
        help="beam: BEAM chats 1-10 (bench/beam.py), 1-5 tune and 6-10 check",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_arguments(parser)
    parser.add_argument(
        "--modes",
        default="fts,bm25,semantic,hybrid,rrf,fused",
        help="comma-separated message-search modes to compare",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep the users if every turn is already embedded"
    )
    parser.add_argument(
        "--conversations", type=int, default=None, help="only N (taken evenly from both halves)"
    )
    parser.add_argument(
        "--forms",
        default="plain",
        help="comma-separated: plain (LoCoMo's turns), bursts (each turn split into "
        "its sentences, sent as a burst of one speaker's messages), one (every "
        "conversation a chat of one user, past the big-user threshold)",
    )
    parser.add_argument("--bursts", action="store_true", help="the same as --forms bursts")
    parser.add_argument("--name", default=None, help="bench/results/<name>.json")
    args = parser.parse_args()
    forms = ("bursts",) if args.bursts else tuple(args.forms.split(","))
    if not forms or any(f not in ("plain", "bursts", "one") for f in forms):
        parser.error("--forms takes plain, bursts and/or one")
    ds = dataset(args.dataset)
    name = args.name or ds.name + "".join(f"-{f}" for f in forms if f != "plain")
    if args.locomo is None and ds is not LOCOMO:
        parser.error("--dataset beam needs the path of BEAM's tier directory (chats/100K)")
    path = args.locomo or DEFAULT_PATH
    if not path.exists():
        parser.error(f"{path} not found")
    result = asyncio.run(
        run(
            path,
            args.modes.split(","),
            reuse=args.reuse,
            conversations=args.conversations,
            forms=forms,
            ds=ds,
        )
    )
    for form in forms:
        part = result["forms"][form]
        print(f"\n{form} form ({part['turns']:,} turns):\n")
        print(report(part["results"], ds))
        print("\ntuning half (first five sample_ids) and check half (the last five):\n")
        print(report_halves(part["results"], ds))
        if not part["loading"].get("reused"):
            lo = part["loading"]
            print(
                f"\ningest + embed of {lo['turns']:,} turns: {lo['ingest_and_embed_s']} s "
                f"({lo['turns_per_s']} turns/s; all stored after {lo['stored_s']} s)"
            )
    print(f"\nwritten to {write_result(name, result)}")


if __name__ == "__main__":
    main()
