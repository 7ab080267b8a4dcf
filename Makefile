# One target per verb. `make run` and `make test` install into .venv when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast test-chaos lint typecheck migrate publish bench-checkpoints bench-ingest bench-embed bench-live bench-peers bench-search bench-context bench-context-quality bench-extract bench-locomo bench-browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned: 2.13.0 is the CPU build; anything else pulls CUDA.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[local,dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/engram run

# pytest-xdist workers, each with its own PostgreSQL, Redis and data directory. Two by
# default: a fresh clone's `make test` on a quiet 2-core machine took 225 s against 330 s
# in one process (same CPU time). On cores other work keeps busy, WORKERS=0 (one
# process) can be faster.
WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n $(WORKERS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n $(WORKERS) -m "not slow"

# The reliability suite alone (also part of `make test`); ENGRAM_CHAOS_SCALE=10 for a long run.
test-chaos: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m chaos tests/chaos

lint: $(STAMP)
	$(BIN)/ruff check shared services engram_cli engram_client engram_langgraph engram_langchain tests bench examples
	$(BIN)/ruff format --check shared services engram_cli engram_client engram_langgraph engram_langchain tests bench examples
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy shared services engram_cli engram_client engram_langgraph engram_langchain

migrate: $(STAMP)
	$(BIN)/engram migrate

publish: $(STAMP)
	$(BIN)/engram publish $(FILE)

bench-ingest: $(STAMP)
	$(BIN)/python -m bench.ingest

bench-search: $(STAMP)
	$(BIN)/python -m bench.search

bench-embed: $(STAMP)
	$(BIN)/python -m bench.embed

# Time to searchable: turns at steady rates, XADD to vector p50/p95/p99.
bench-live: $(STAMP)
	$(BIN)/python -m bench.embed live

LOCOMO ?= ../shared/data/locomo/locomo10.json
bench-extract: $(STAMP)
	$(BIN)/python -m bench.extract $(LOCOMO)

# Uses the stack of `make run` if one is running, else starts its own.
bench-locomo: $(STAMP)
	$(BIN)/python -m bench.locomo $(LOCOMO)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

bench-context: $(STAMP)
	$(BIN)/python -m bench.context

# LoCoMo through the whole pipeline: what context, recall and search hand the agent.
# Uses the stack of `make run` if one is running, else starts its own.
bench-context-quality: $(STAMP)
	$(BIN)/python -m bench.context --quality $(LOCOMO)

# LangGraph checkpoints: engram over HTTP beside LangGraph's Postgres checkpointer, one run.
bench-checkpoints: $(STAMP)
	$(BIN)/python -m bench.checkpoints

bench-browser: $(STAMP)
	$(BIN)/python -m bench.browser

# engram beside mem0 through ../shared/peers (its own venv, built once in ../peers-venv).
PEERS ?= ../shared/peers
bench-peers: $(STAMP)
	$(BIN)/python -m bench.peers --harness $(PEERS) --locomo $(LOCOMO)
