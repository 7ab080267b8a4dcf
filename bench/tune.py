"""Message-search ranking variants side by side, in process, over users a bench loaded.

    python -m bench.locomo [PATH] --modes fused                 # loads locomo-*
    python -m bench.tune [PATH] [--variants fused,semantic,...]
    python -m bench.tune --dataset beam PATH/chats/100K

For trying a ranking rule on both tuning sets before it becomes a ``RankSpec``
field's value (docs/retrieval.md): every question of the loaded conversations is
embedded once by the local model (as the query service does), its candidate rows
are read once per distinct candidate statement (the fields that change the SQL:
lexical side, passages, candidates, turns read), and each variant only re-scores
them with ``ranking.turns.score_rows``, so a dozen variants cost about one. R@10
and nDCG@10 by half and category, as ``bench.locomo`` reports them (its numbers
and this harness's differ only where the service embeds a question differently:
a batch against one at a time).

Variants are ``VARIANTS`` below: the service's modes by name, and candidate rules
as ``FUSED.but(...)``. It reads the stack of ``make run`` (``<data_dir>/stack.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Progress, write_result
from bench.locomo import (
    DEFAULT_PATH,
    Conversation,
    Row,
    add_dataset_arguments,
    dataset,
    halves,
    report_halves,
    score,
    summarise,
    turn_of,
)
from engram_cli.embedded import with_running_stack
from services.query.ranking import turns
from services.query.ranking.fusion import FUSED, MESSAGE_MODES, RankSpec, asks_assistant
from shared.db import Executor, create_pool
from shared.embeddings import Embedder, resolve_embedder
from shared.settings import CommonSettings

LIMIT = 50

VARIANTS: dict[str, RankSpec] = {
    **{str(name): spec for name, spec in MESSAGE_MODES.items()},
    # the rules a chat with an assistant reads, and the people's rules everywhere
    "people": FUSED.but(name="people", assistant=None),
    "assistant": FUSED.assistant or FUSED,
    # what was learned from a turn lifts it (``fused`` takes 0.1; docs/retrieval.md,
    # "What was learned from a turn")
    "unlearned": FUSED.but(name="unlearned", w_learned=0.0),
    "learned.05": FUSED.but(name="learned.05", w_learned=0.05),
    "learned.20": FUSED.but(name="learned.20", w_learned=0.2),
    # a question about what the assistant said lifts the assistant's turns, not the user's
    # (``fused`` takes 0: neither role; ``said.none``: the user's, as before the rule)
    "said.none": FUSED.but(name="said.none", assistant_asked_lift=None),
    "said.25": FUSED.but(name="said.25", assistant_asked_lift=0.25),
    "said.5": FUSED.but(name="said.5", assistant_asked_lift=0.5),
}


def fetch_key(spec: RankSpec) -> tuple[Any, ...]:
    """What decides a spec's candidate statement and its arguments (None: any)."""
    lex, sem = spec.w_lex > 0, spec.w_sem > 0
    return (
        spec.lexical if lex else None,
        spec.lexical_passages if lex else None,
        spec.semantic_passages if sem else None,
        spec.k(LIMIT),
        spec.turns_read if spec.reads_turns else None,
        spec.date_lift > 0 if lex else None,
        spec.w_learned > 0 if sem else None,
        lex,
        sem,
    )


def serves(fetched: tuple[Any, ...], wanted: tuple[Any, ...]) -> bool:
    """Whether the rows of ``fetched`` are the rows ``wanted`` would read: a signal a
    spec does not weigh is dropped by ``fusion.admit``, neighbours it does not read
    are not looked at."""
    *f_fields, f_lex, f_sem = fetched
    *w_fields, w_lex, w_sem = wanted
    if (w_lex and not f_lex) or (w_sem and not f_sem):
        return False
    return all(w is None or w == f for w, f in zip(w_fields, f_fields, strict=True))


async def rows_for(
    conn: Executor, spec: RankSpec, user_id: str, query: str, vector: list[float]
) -> tuple[list[Any], bool]:
    rows, named = await turns.candidate_rows(
        conn, spec, user_id=user_id, query=query, vector=vector, limit=LIMIT
    )
    return [dict(r) for r in rows], named


async def run(
    path: Path, ds_name: str, variants: dict[str, RankSpec], settings: CommonSettings
) -> dict[str, Any]:
    ds = dataset(ds_name)
    convs: list[Conversation] = ds.load(path)
    half = halves(convs)
    work = [(c, q) for c in convs for q in c.questions]
    assert settings.database_url is not None
    pool = await create_pool(settings.database_url.get_secret_value(), max_size=2)
    # each user's own embedder, as the query service resolves it; one question at a time
    embedders: dict[str, Embedder] = {}
    vectors: list[list[float]] = []
    progress = Progress("questions embedded", len(work))
    for conv, q in work:
        if conv.user_id not in embedders:
            found = await resolve_embedder(pool, conv.user_id, settings)
            if found is None:
                raise SystemExit(f"{conv.user_id} has no embedder: load it with bench.locomo")
            embedders[conv.user_id] = found
        vectors.extend(await embedders[conv.user_id].embed([q.text]))
        progress.update(len(vectors))
    external: dict[int, tuple[str, str]] = {}
    # the fewest statements: the specs weighing both signals first, the rest served by them
    order = sorted(variants.values(), key=lambda s: (s.w_lex <= 0) + (s.w_sem <= 0))
    source: dict[str, tuple[Any, ...]] = {}
    for spec in order:
        key = fetch_key(spec)
        source[spec.name] = next((k for k in source.values() if serves(k, key)), key)
    fetched: dict[tuple[Any, ...], list[tuple[list[Any], bool]]] = {}
    try:
        async with pool.acquire() as conn:
            for key in dict.fromkeys(source.values()):
                spec = next(s for s in order if source[s.name] == key)
                progress = Progress(f"candidates ({spec.name})", len(work))
                out = []
                for n, ((conv, q), vec) in enumerate(zip(work, vectors, strict=True)):
                    out.append(await rows_for(conn, spec, conv.user_id, q.text, vec))
                    progress.update(n + 1)
                fetched[key] = out
            ids = {r["id"] for rows in fetched.values() for rs, _ in rows for r in rs}
            for r in await conn.fetch(
                "SELECT id, external_id, chat_id FROM messages WHERE id = ANY($1::bigint[])",
                list(ids),
            ):
                external[int(r["id"])] = (r["external_id"], r["chat_id"])
    finally:
        await pool.close()
    results: dict[str, Any] = {}
    for name, spec in variants.items():
        rows_of = fetched[source[spec.name]]
        scored: list[Row] = []
        for (conv, q), (rs, periods) in zip(work, rows_of, strict=True):
            best, _ = turns.score_rows(
                spec, rs, LIMIT, periods=periods, asks_assistant=asks_assistant(q.text)
            )
            ranked = []
            for c in best:
                ext, chat = external.get(c.id, ("", ""))
                ranked.append(turn_of(ext) if chat == conv.sample_id else "-")
            scored.append((half[conv.sample_id], q.category, score(ranked, q.evidence), 0.0))
        results[name] = summarise(scored, ds)
    return {"set": ds.name, "questions": len(work), "results": results}


def choose(names: str, table: dict[str, RankSpec]) -> dict[str, RankSpec]:
    unknown = [n for n in names.split(",") if n not in table]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}: {', '.join(table)}")
    return {n: table[n] for n in names.split(",")}


def main(table: dict[str, RankSpec] = VARIANTS, pick: Callable[..., Any] = choose) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dataset_arguments(parser)
    parser.add_argument("--variants", default=",".join(table), help="comma-separated names")
    parser.add_argument("--name", default=None, help="bench/results/<name>.json")
    args = parser.parse_args()
    if args.locomo is None and args.dataset != "locomo":
        parser.error("--dataset beam needs the path of BEAM's tier directory (chats/100K)")
    path = args.locomo or DEFAULT_PATH
    variants = pick(args.variants, table)
    settings = CommonSettings()
    result = asyncio.run(run(path, args.dataset, variants, with_running_stack(settings)))
    ds = dataset(args.dataset)
    print(report_halves(result["results"], ds))
    name = args.name or f"tune-{ds.name}"
    print(f"\nwritten to {write_result(name, result)}", file=sys.stderr)


if __name__ == "__main__":
    main()
