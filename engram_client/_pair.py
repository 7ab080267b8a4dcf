"""The sync and async clients of one service, made on first use: what an adapter with
both sync and async methods holds (engram_langgraph, engram_langchain)."""

from __future__ import annotations

from engram_client._client import AsyncEngram, Engram


class ClientPair:
    """``base_url`` and ``api_key`` (``user``: the user an admin key acts for), or ready
    ``client`` / ``aclient`` to share their connections."""

    def __init__(
        self,
        base_url: str | None,
        api_key: str | None,
        *,
        user: str | None = None,
        client: Engram | None = None,
        aclient: AsyncEngram | None = None,
    ) -> None:
        if (client is None or aclient is None) and (base_url is None or api_key is None):
            raise ValueError("give base_url and api_key, or both clients")
        self._url, self._key, self._user = base_url, api_key, user
        self._client, self._aclient = client, aclient

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()

    @property
    def sync(self) -> Engram:
        if self._client is None:
            assert self._url is not None and self._key is not None
            self._client = Engram(self._url, self._key, user=self._user)
        return self._client

    @property
    def aio(self) -> AsyncEngram:
        if self._aclient is None:
            assert self._url is not None and self._key is not None
            self._aclient = AsyncEngram(self._url, self._key, user=self._user)
        return self._aclient
