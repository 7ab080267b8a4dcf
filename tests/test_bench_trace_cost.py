"""bench/trace_cost.py: its workload runs against this code (natively, without valgrind),
on the test PostgreSQL and Redis. The bench starts the services' runtimes by hand
(no broker) and drives their consumers and the query app directly; this keeps that
workload working as the services change: every turn stored and embedded, every
request answered."""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.trace_cost import ROOT, EmbeddingServer, run_way
from tests.conftest import Infra


def test_the_instruction_counting_workload_runs_against_this_code(
    infra: Infra, tmp_path: Path
) -> None:
    server = EmbeddingServer()
    try:
        got = run_way(
            ROOT,
            db_url=infra.database_url,
            redis_url=infra.redis_url,
            embed_url=server.url,
            helper=None,
            out=tmp_path,
            turns=100,
            batch=50,
            queries=2,
            run=f"tc{uuid.uuid4().hex[:8]}",
            native=True,
        )
    finally:
        server.stop()
    # a warm-up batch of 50, then 100 turns: one embed request per batch of turns;
    # then the assistant-shaped chat's 40 turns, stored and embedded
    assert got["checks"] == {
        "stored": 150,
        "embed_requests": 3,
        "embedded": 150,
        "assistant_chat": [40, 40],
        # this code has the chat-kind gate: the short chat reads the people's rules,
        # the assistant-shaped one the assistant's
        "assistant_gate": {"u0": [False], "a": [True]},
        "status": {
            "search": [200],
            "context": [200],
            "turn": [200],
            "search_assistant": [200],
            "context_assistant": [200],
        },
    }
