"""Keep one slow or dead provider endpoint from holding anyone else up: a deadline
on every call, a circuit per endpoint, a limit on calls in flight per endpoint, and
calls taken out of line. One place for every provider kind: the embedding endpoints
(``shared.embeddings.guard``) and the language model (``shared.llm.client``).

A provider client retries a call (``shared.provider_http``); a hanging endpoint can
make one call last minutes. :class:`Guards` bounds the whole call, retries
included, by a deadline and counts the outcome on the endpoint's circuit:

- ``closed``: calls go through; ``failures_to_open`` unavailable outcomes in a
  row (timeouts, refused connections, 429/5xx after retries, the deadline) open it;
- ``open``: calls fail at once with ``ProviderUnavailable`` for ``cooldown_s``
  (doubled on every re-open, at most ``max_cooldown_s``);
- after the cooldown one trial call goes through; its success closes the circuit.

A refusal of the input (``ProviderError`` that is not unavailable: a 4xx, a
malformed answer) says the endpoint is alive and counts as a success.

:meth:`Guards.call_inline` waits for a call at most ``inline_s``; one not answered
by then goes on out of line (to its deadline, its outcome still counted on the
circuit) and the caller gets ``ProviderUnavailable`` at once, to do without it;
while such a call is in flight, new calls to that endpoint fail at once too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.errors import ProviderError, ProviderUnavailable

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass
class Circuit:
    failures_to_open: int = 3
    cooldown_s: float = 15.0
    max_cooldown_s: float = 600.0
    failures: int = 0
    opened: int = 0  # times opened in a row (the cooldown doubles with it)
    open_until: float = 0.0
    trial: bool = False  # a half-open trial call is in flight

    @property
    def state(self) -> str:
        if self.failures < self.failures_to_open:
            return "closed"
        return "open" if time.monotonic() < self.open_until or self.trial else "half-open"

    def admit(self) -> bool:
        """May a call go to the endpoint now? (Claims the one half-open trial.)"""
        state = self.state
        if state == "closed":
            return True
        if state == "half-open":
            self.trial = True
            return True
        return False

    def success(self) -> None:
        self.failures = 0
        self.opened = 0
        self.trial = False

    def failure(self) -> None:
        self.trial = False
        self.failures += 1
        if self.failures >= self.failures_to_open:
            cooldown = min(self.cooldown_s * 2**self.opened, self.max_cooldown_s)
            self.opened += 1
            self.open_until = time.monotonic() + cooldown

    def retry_in(self) -> float:
        return max(0.0, self.open_until - time.monotonic())


class Guards:
    """Circuits and in-flight limits, one of each per endpoint, for one process."""

    def __init__(
        self,
        *,
        failures_to_open: int = 3,
        cooldown_s: float = 15.0,
        max_cooldown_s: float = 600.0,
        per_endpoint: int = 2,
    ) -> None:
        self.failures_to_open = failures_to_open
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.per_endpoint = per_endpoint
        self._circuits: dict[str, Circuit] = {}
        self._busy: dict[str, int] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._detached: dict[asyncio.Task[Any], tuple[str, frozenset[str]]] = {}
        self._background: set[asyncio.Task[Any]] = set()

    def circuit(self, key: str) -> Circuit:
        found = self._circuits.get(key)
        if found is None:
            found = Circuit(self.failures_to_open, self.cooldown_s, self.max_cooldown_s)
            self._circuits[key] = found
        return found

    def forget(self, key: str) -> None:
        """Drop what was learned of ``key``: a new server at that address (an endpoint
        moved, a port given to someone else) starts with a closed circuit."""
        self._circuits.pop(key, None)

    def busy(self, key: str) -> int:
        """Calls to ``key`` in flight now."""
        return self._busy.get(key, 0)

    def slots(self, key: str) -> asyncio.Semaphore:
        """``per_endpoint`` calls to ``key`` at once, apart from everyone else's."""
        found = self._slots.get(key)
        if found is None:
            found = asyncio.Semaphore(self.per_endpoint)
            self._slots[key] = found
        return found

    def detach(
        self, task: asyncio.Task[Any], key: str, owners: frozenset[str] = frozenset()
    ) -> None:
        """Keep ``task`` (a call to ``key`` taken out of line, for ``owners``' rows)
        alive until it ends."""
        self._detached[task] = (key, owners)
        task.add_done_callback(self._finished)

    def background(self, task: asyncio.Task[Any]) -> None:
        """Keep ``task`` (bookkeeping for an endpoint, not a call to it: it counts in no
        share) alive until it ends; :meth:`settle` waits for it, :meth:`aclose` cancels it."""
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("background work for an endpoint failed: %r", task.exception())

    def out_of_line(self, key: str) -> int:
        """Calls to ``key`` taken out of line and not finished yet."""
        return sum(1 for k, _ in self._detached.values() if k == key)

    def out_of_line_for(self, owner: str) -> int:
        """Calls out of line for ``owner``'s rows, whichever endpoints they go to (a
        user who keeps changing their endpoint's URL makes a new key each time)."""
        return sum(1 for _, owners in self._detached.values() if owner in owners)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._detached.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a call taken out of line failed: %r", task.exception())

    @property
    def detached(self) -> int:
        return len(self._detached)

    async def settle(self) -> None:
        """Wait until every call out of line now has ended (its outcome stored)."""
        await asyncio.gather(*self._detached, *self._background, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel what runs out of line (its rows are leased: the retry sweep has them)."""
        tasks = [*self._detached, *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def call(
        self, key: str | None, work: Callable[[], Awaitable[T]], *, deadline_s: float
    ) -> T:
        """Run ``work`` (a provider call) under ``key``'s circuit and ``deadline_s``.

        Raises ``ProviderUnavailable`` at once while the circuit is open, and when the
        deadline passes (the call is cancelled)."""
        if key is None:
            return await work()
        circuit = self.circuit(key)
        if not circuit.admit():
            raise ProviderUnavailable(
                f"{key}: circuit open after {circuit.failures} failed calls in a row; "
                f"next try in {circuit.retry_in():.0f} s"
            )
        self._busy[key] = self._busy.get(key, 0) + 1
        try:
            result = await asyncio.wait_for(work(), deadline_s)
        except TimeoutError:
            circuit.failure()
            raise ProviderUnavailable(f"{key}: no answer within {deadline_s:g} s") from None
        except ProviderUnavailable:
            circuit.failure()
            raise
        except ProviderError:
            circuit.success()  # it answered: the endpoint is up, the input was refused
            raise
        except BaseException:
            circuit.trial = False
            raise
        finally:
            self._busy[key] -= 1
        circuit.success()
        return result

    async def call_inline(
        self,
        key: str | None,
        work: Callable[[], Awaitable[T]],
        *,
        deadline_s: float,
        inline_s: float,
    ) -> T:
        """:meth:`call`, waited for at most ``inline_s``: a call not answered by then
        goes on out of line (to ``deadline_s``) and ``ProviderUnavailable`` is raised
        now; while it is in flight, new calls to ``key`` raise it at once."""
        if key is None:
            return await work()
        if self.out_of_line(key):
            raise ProviderUnavailable(
                f"{key}: an earlier call has not answered in {inline_s:g} s and is still "
                "in flight; retried later"
            )
        task = asyncio.ensure_future(self.call(key, work, deadline_s=deadline_s))
        try:
            done, _ = await asyncio.wait({task}, timeout=inline_s)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            return task.result()
        self.detach(task, key)
        raise ProviderUnavailable(f"{key}: no answer within {inline_s:g} s; taken out of line")
