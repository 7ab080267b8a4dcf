"""LangGraph's checkpointer on engram's thread checkpoints (Jarvus short-term memory).

A LangGraph checkpoint is one engram checkpoint of the thread, in its namespace
(``checkpoint_ns``), with the parent LangGraph names (engram keeps the lineage).
Its state is JSON: the checkpoint's own fields as they are, each channel value
and each pending write serialized by the saver's ``serde`` (type + base64), and
LangGraph's metadata as the ``metadata`` object, which ``list(filter=...)``
matches by containment on the server. Every call goes over engram's HTTP API with
:mod:`engram_client` (its errors and retries); nothing reads engram's database.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from engram_client import AsyncEngram, ClientPair, Engram, NotFound
from engram_client.models import Checkpoint as Stored
from engram_langgraph._clients import OnEngram

FORMAT = "langgraph"
"""The ``format`` of a state this saver wrote (other checkpoints of a thread are skipped)."""

PAGE = 1000
"""Checkpoints per query (the API's most); a longer listing pages with a cursor."""

_PLAIN = ("v", "id", "ts", "channel_versions", "versions_seen", "updated_channels")


class EngramSaver(OnEngram, BaseCheckpointSaver[int]):
    """``EngramSaver(url, api_key)``: a LangGraph checkpointer, sync and async.

    ``user`` names the user an admin key acts for. Pass ready clients instead of
    a URL and key to share their connections (``client`` for the sync methods,
    ``aclient`` for the async ones).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        user: str | None = None,
        client: Engram | None = None,
        aclient: AsyncEngram | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self._clients = ClientPair(base_url, api_key, user=user, client=client, aclient=aclient)

    # --- encoding ---------------------------------------------------------------------

    def _dump(self, value: Any) -> dict[str, str]:
        type_, data = self.serde.dumps_typed(value)
        return {"type": type_, "b64": base64.b64encode(data).decode()}

    def _load(self, blob: dict[str, str]) -> Any:
        return self.serde.loads_typed((blob["type"], base64.b64decode(blob["b64"])))

    def _state(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> dict[str, Any]:
        rest = {k: v for k, v in checkpoint.items() if k not in _PLAIN and k != "channel_values"}
        state: dict[str, Any] = {
            "format": FORMAT,
            "checkpoint": {k: checkpoint[k] for k in _PLAIN if k in checkpoint},  # type: ignore[literal-required]
            "channel_values": {k: self._dump(v) for k, v in checkpoint["channel_values"].items()},
            "metadata": get_serializable_checkpoint_metadata(config, metadata),
        }
        if rest:
            state["rest"] = self._dump(rest)
        return state

    def _tuple(self, c: Stored) -> CheckpointTuple:
        state = c.state
        checkpoint: dict[str, Any] = dict(state["checkpoint"])
        if "rest" in state:
            checkpoint.update(self._load(state["rest"]))
        checkpoint["channel_values"] = {
            k: self._load(v) for k, v in state["channel_values"].items()
        }
        configurable = {"thread_id": c.thread_id, "checkpoint_ns": c.checkpoint_ns}
        parent = (
            RunnableConfig(configurable={**configurable, "checkpoint_id": c.parent_id})
            if c.parent_id
            else None
        )
        return CheckpointTuple(
            config=RunnableConfig(configurable={**configurable, "checkpoint_id": c.checkpoint_id}),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=state["metadata"],
            parent_config=parent,
            pending_writes=[(w.task_id, w.channel, self._load(w.value)) for w in c.writes or []],
        )

    @staticmethod
    def _where(config: RunnableConfig | None) -> dict[str, Any]:
        conf = (config or {}).get("configurable") or {}
        return {
            "thread_id": conf.get("thread_id"),
            "checkpoint_ns": conf.get("checkpoint_ns"),
            "checkpoint_id": conf.get("checkpoint_id"),
        }

    @staticmethod
    def _lookup(config: RunnableConfig) -> dict[str, Any]:
        conf = config["configurable"]
        return {
            "thread_id": str(conf["thread_id"]),
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": get_checkpoint_id(config),
            "contains": {"format": FORMAT},
            "limit": 1,
            "writes": True,
        }

    @staticmethod
    def _list_query(
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> dict[str, Any]:
        q = EngramSaver._where(config)
        q["contains"] = {"format": FORMAT, **({"metadata": filter} if filter else {})}
        if before is not None:
            q["before"] = get_checkpoint_id(before)
        q["limit"] = min(limit, PAGE) if limit is not None else PAGE
        q["writes"] = True
        return q

    def _put_args(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
    ) -> tuple[dict[str, Any], RunnableConfig]:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        args = {
            "thread_id": thread_id,
            "checkpoint_id": checkpoint["id"],
            "state": self._state(config, checkpoint, metadata),
            "checkpoint_ns": ns,
            "parent_id": conf.get("checkpoint_id"),
        }
        out = RunnableConfig(
            configurable={
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        )
        return args, out

    def _writes_args(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> dict[str, Any]:
        conf = config["configurable"]
        return {
            "thread_id": str(conf["thread_id"]),
            "checkpoint_id": conf["checkpoint_id"],
            "task_id": task_id,
            "writes": [
                {"idx": WRITES_IDX_MAP.get(channel, i), "channel": channel, "value": self._dump(v)}
                for i, (channel, v) in enumerate(writes)
            ],
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "task_path": task_path,
            # special writes (error, interrupt...) replace; a task's ordinary ones are kept
            "replace": all(channel in WRITES_IDX_MAP for channel, _ in writes),
        }

    @staticmethod
    def _runs(run_ids: Sequence[str]) -> Iterator[list[dict[str, Any]]]:
        ids = list(run_ids)
        for i in range(0, len(ids), PAGE):
            yield [{"metadata": {"run_id": r}} for r in ids[i : i + PAGE]]

    @staticmethod
    def _keep(strategy: str) -> str:
        if strategy == "keep_latest":
            return "latest"
        if strategy == "delete":
            return "none"
        raise ValueError(f"strategy: {strategy!r} is not keep_latest or delete")

    # --- sync -------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = self.client.checkpoints.query(**self._lookup(config)).checkpoints
        return self._tuple(found[0]) if found else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        q = self._list_query(config, filter, before, limit)
        left = limit
        while True:
            page = self.client.checkpoints.query(**q).checkpoints
            for c in page:
                yield self._tuple(c)
            left = None if left is None else left - len(page)
            if len(page) < q["limit"] or left == 0 or not q["thread_id"]:
                return
            q["before"], q["limit"] = page[-1].checkpoint_id, min(left or PAGE, PAGE)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args, out = self._put_args(config, checkpoint, metadata)
        self.client.checkpoints.put(**args)
        return out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if writes:
            self.client.checkpoints.put_writes(
                **self._writes_args(config, writes, task_id, task_path)
            )

    def delete_thread(self, thread_id: str) -> None:
        try:
            self.client.checkpoints.delete_thread(str(thread_id))
        except NotFound:
            pass  # no checkpoint: nothing to delete

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for chunk in self._runs(run_ids):
            self.client.checkpoints.delete_matching(chunk)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.client.checkpoints.copy(str(source_thread_id), str(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        keep = self._keep(strategy)
        ids = [str(t) for t in thread_ids]
        for i in range(0, len(ids), PAGE):
            self.client.checkpoints.prune(ids[i : i + PAGE], keep=keep)  # type: ignore[arg-type]

    # --- async ------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = (await self.aclient.checkpoints.query(**self._lookup(config))).checkpoints
        return self._tuple(found[0]) if found else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        q = self._list_query(config, filter, before, limit)
        left = limit
        while True:
            page = (await self.aclient.checkpoints.query(**q)).checkpoints
            for c in page:
                yield self._tuple(c)
            left = None if left is None else left - len(page)
            if len(page) < q["limit"] or left == 0 or not q["thread_id"]:
                return
            q["before"], q["limit"] = page[-1].checkpoint_id, min(left or PAGE, PAGE)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args, out = self._put_args(config, checkpoint, metadata)
        await self.aclient.checkpoints.put(**args)
        return out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if writes:
            await self.aclient.checkpoints.put_writes(
                **self._writes_args(config, writes, task_id, task_path)
            )

    async def adelete_thread(self, thread_id: str) -> None:
        try:
            await self.aclient.checkpoints.delete_thread(str(thread_id))
        except NotFound:
            pass  # no checkpoint: nothing to delete

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        for chunk in self._runs(run_ids):
            await self.aclient.checkpoints.delete_matching(chunk)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.aclient.checkpoints.copy(str(source_thread_id), str(target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        keep = self._keep(strategy)
        ids = [str(t) for t in thread_ids]
        for i in range(0, len(ids), PAGE):
            await self.aclient.checkpoints.prune(ids[i : i + PAGE], keep=keep)  # type: ignore[arg-type]
