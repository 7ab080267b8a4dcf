"""What the checkpointer and the store share: engram's sync and async clients."""

from __future__ import annotations

from engram_client import AsyncEngram, ClientPair, Engram


class OnEngram:
    """A LangGraph adapter that talks to engram through a :class:`ClientPair`."""

    _clients: ClientPair

    @property
    def client(self) -> Engram:
        return self._clients.sync

    @property
    def aclient(self) -> AsyncEngram:
        return self._clients.aio

    def close(self) -> None:
        self._clients.close()

    async def aclose(self) -> None:
        await self._clients.aclose()
