"""A search's query: what its text may be and means, and its vector.

**The text** (one rule for every search; ranking, the use cases and the
adapters all read it here, below them all):

Every search of the agent API (``/v1/memory/search``, ``/v1/facts/search``,
``/v1/messages/search``, ``/v1/episodes/search``, ``/v1/recall``,
``/v1/store/search``, the Jarvus reads, admin search), the tools that call them
(HTTP tool call, MCP) and the memory browser's search box take their text
through :data:`SearchText` (or :data:`OptionalSearchText` where it may be left
out) and decide with :func:`lists_newest`:

- a text that is empty, only whitespace, or ``*`` asks for no match: the newest
  rows first (a listing, under the call's other filters); nothing is embedded;
- a text longer than :data:`MAX_SEARCH_CHARS` is refused (422 naming the field,
  never echoing its value; a tool error for a tool call).

The context's ``message`` follows the same rule: a blank message has nothing to
match, so nothing is embedded, no past turn is shown and the memories are the
newest. The facts listing's ``search`` filter (``GET /v1/facts``) too: blank is
no filter.

**The vector**: which embedder serves a user's request, and a failure-tolerant
query vector.

``create_app`` keeps one resolver ``(pool, user_id, settings, *, stored=None) ->
Embedder | None`` (default :func:`shared.embeddings.resolve_embedder`; None = the
user runs full-text-only). Search, tools, people and context all go through it.
``stored`` is the user's settings row when the request already read it with the
API key (``shared.apikeys.lookup_key``); the resolver then reads nothing more.

A query embedding that fails is not an error for a read: Nova 3.2 says search
then runs full-text-only, so :func:`embed_query` answers a :class:`QueryVector`
without a vector and with a warning, :func:`user_query_vector` returns None and
logs, and :func:`user_embedder` hands back an :class:`Unavailable` embedder whose calls
raise ``ProviderUnavailable`` so callers can degrade with a warning.

A user's HTTP endpoint that hangs must not hold a search or ``remember`` for the
client's whole retry budget: every query-side embedder is guarded
(``shared.embeddings.guard``) with ``ENGRAM_EMBEDDING_QUERY_DEADLINE_S`` and its
endpoint's circuit, so the read goes on full-text-only within that deadline, and
at once while the circuit is open.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Protocol

import asyncpg
from pydantic import Field

from shared.embeddings import DimensionTooLarge, Embedder, fit_to_column, resolve_embedder
from shared.embeddings.guard import GuardedEmbedder, default_guards
from shared.embeddings.local import LocalEmbedder
from shared.embeddings.user_settings import Stored, as_embedding_settings
from shared.errors import EngramError, InfrastructureError, ProviderUnavailable
from shared.memory.vectors import ModelEmbedder
from shared.settings import CommonSettings

MAX_SEARCH_CHARS = 2_000

NEWEST = "empty, blank or '*' = the newest first"
"""How the rule reads in a field's description (and so in the tool schemas)."""


def lists_newest(text: str | None) -> bool:
    """Whether ``text`` asks for the newest rows rather than for matches."""
    return text is None or text.strip() in ("", "*")


def described(what: str) -> str:
    """A search field's description: what it finds, then the rule for a blank one."""
    return f"{what}; {NEWEST}"


SearchText = Annotated[
    str, Field(max_length=MAX_SEARCH_CHARS, description=described("what to find"))
]
OptionalSearchText = Annotated[
    str | None, Field(max_length=MAX_SEARCH_CHARS, description=described("what to find"))
]

log = logging.getLogger(__name__)

# A query this short (a question is ~60 characters, ~13 tokens: ~1 ms of the int8
# model) is embedded by the local model on the event loop itself when no other pass
# is running: the hand-off to a worker thread and the wake-up back on the loop were
# ~2 ms of a search's wall on a busy machine. A longer one goes to a thread, so the
# loop never stops for long.
INLINE_MAX_CHARS = 300


class Resolver(Protocol):
    async def __call__(
        self,
        pool: asyncpg.Pool,
        user_id: str,
        settings: CommonSettings,
        /,
        *,
        stored: Stored | None = None,
    ) -> Embedder | None: ...


default_resolver: Resolver = resolve_embedder


class Unavailable:
    """Stands in for a provider that could not even be resolved."""

    provider = "unavailable"
    model = "unavailable"
    dimensions = None

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ProviderUnavailable(self.reason)


def _endpoint_of(embedder: Embedder) -> str | None:
    """The circuit an embedder's calls go through (None: the in-process local model)."""
    provider = getattr(embedder, "provider", None)
    if provider is None or provider == "local":
        return None
    base = getattr(getattr(embedder, "_endpoint", None), "base_url", None)
    return str(base) if base else f"{provider}:{getattr(embedder, 'model', '')}"


def guarded(embedder: Embedder | None, settings: CommonSettings) -> Embedder | None:
    """``embedder`` with the query deadline and its endpoint's circuit."""
    if embedder is None or isinstance(embedder, GuardedEmbedder):
        return embedder
    key = _endpoint_of(embedder)
    if key is None:
        return embedder
    deadline = as_embedding_settings(settings).embedding_query_deadline_s
    return GuardedEmbedder(embedder, key, default_guards(), deadline_s=deadline)


async def user_embedder(
    resolver: Resolver, pool: asyncpg.Pool, *, user_id: str, settings: CommonSettings
) -> Embedder | Unavailable | None:
    """The user's embedder (guarded); :class:`Unavailable` when resolving it failed."""
    try:
        return guarded(await resolver(pool, user_id, settings), settings)
    except EngramError as exc:
        log.warning("cannot resolve the embedder of a user: %s", exc)
        return Unavailable(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class QueryVector:
    """The query's vector (or None: full-text only) and why it is missing, if it failed."""

    vector: list[float] | None
    model: str | None
    warning: str | None

    @property
    def retrieval(self) -> str:
        return "hybrid" if self.vector is not None else "full_text"


async def embed_query(embedder: ModelEmbedder | None, text: str, *, dim: int) -> QueryVector:
    """The one way a query becomes a vector: a blank query or no embedder has none; a
    short query on the local model is embedded on the loop (no thread hop); the vector
    is zero-padded to the column (a longer one raises ``DimensionTooLarge``); a
    provider failure becomes a warning, never an error."""
    if embedder is None or lists_newest(text):
        return QueryVector(None, None, None)
    try:
        vectors = None
        if isinstance(embedder, LocalEmbedder) and len(text) <= INLINE_MAX_CHARS:
            vectors = embedder.embed_now([text])  # on the loop: no thread hop
        if vectors is None:
            vectors = await embedder.embed([text])
        [vector] = vectors
        # a test double may not name its model; only recall and context read it
        return QueryVector(fit_to_column(vector, dim), getattr(embedder, "model", None), None)
    except InfrastructureError as exc:
        log.warning("embedding provider unavailable, using full-text search: %s", exc)
        return QueryVector(
            None,
            None,
            f"embedding provider unavailable ({exc}); results from full-text search only",
        )


async def user_query_vector(
    resolver: Resolver,
    pool: asyncpg.Pool,
    *,
    user_id: str,
    settings: CommonSettings,
    text: str,
    stored: Stored | None = None,
) -> list[float] | None:
    """The user's query vector, or None when they have no embedder or embedding failed;
    ``stored``: the user's settings row if this request already read it."""
    try:
        embedder = guarded(await resolver(pool, user_id, settings, stored=stored), settings)
        return (await embed_query(embedder, text, dim=settings.embedding_dim)).vector
    except DimensionTooLarge as exc:
        log.warning("query vector cannot be compared: %s", exc)
        return None
    except (EngramError, OSError, ValueError) as exc:
        log.warning("query embedding failed, searching full-text only: %s", exc)
        return None
