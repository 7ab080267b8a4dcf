"""Every endpoint once: its method, path, body and answer model.

The sync and async clients turn these builders into methods
(:mod:`engram_client._client`), so an endpoint is described in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from engram_client import models as m

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    model: type[T]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)


def _body(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def me() -> Call[m.Me]:
    return Call("GET", "/v1/me", m.Me)


# memory (Nova)
def memory_search(
    query: str = "*",
    *,
    limit: int | None = None,
    theme: str | None = None,
    types: list[str] | None = None,
    recency_days: int | None = None,
    status: Literal["active", "archived", "any"] | None = None,
) -> Call[m.MemorySearch]:
    body = _body(
        query=query,
        limit=limit,
        theme=theme,
        types=types,
        recency_days=recency_days,
        status=status,
    )
    return Call("POST", "/v1/memory/search", m.MemorySearch, body)


def memory_add(
    content: str,
    *,
    type: str = "fact",
    theme: str | None = None,
    tags: list[str] | None = None,
) -> Call[m.MemoryAdded]:
    body = _body(content=content, type=type, theme=theme, tags=tags)
    return Call("POST", "/v1/memory/add", m.MemoryAdded, body)


def memory_get(item_id: str) -> Call[m.MemoryItem]:
    return Call("GET", f"/v1/memory/items/{item_id}", m.MemoryItem)


def memory_archive(item_id: str) -> Call[m.Model]:
    return Call("POST", f"/v1/memory/items/{item_id}/archive", m.Model)


def memory_delete(item_id: str) -> Call[m.Model]:
    return Call("DELETE", f"/v1/memory/items/{item_id}", m.Model)


def memory_themes() -> Call[m.Themes]:
    return Call("GET", "/v1/memory/themes", m.Themes)


# remember / recall (Ash)
def remember(
    content: str | None = None,
    *,
    facts: list[dict[str, Any]] | None = None,
    subjects: list[str] | None = None,
    expires_in_days: int | None = None,
    shared: bool | None = None,
) -> Call[m.Remembered]:
    body = _body(
        content=content,
        facts=facts,
        subjects=subjects,
        expires_in_days=expires_in_days,
        shared=shared,
    )
    return Call("POST", "/v1/remember", m.Remembered, body)


def recall(query: str, *, about: str | None = None) -> Call[m.Recalled]:
    return Call("POST", "/v1/recall", m.Recalled, _body(query=query, about=about))


# facts (Navi)
def facts_save(
    category: str,
    key: str,
    value: str,
    *,
    source: str | None = None,
    confidence: float | None = None,
    expires_days: int | None = None,
    source_context: str | None = None,
) -> Call[m.FactSaved]:
    body = _body(
        category=category,
        key=key,
        value=value,
        source=source,
        confidence=confidence,
        expires_days=expires_days,
        source_context=source_context,
    )
    return Call("POST", "/v1/facts", m.FactSaved, body)


def facts_search(query: str, *, limit: int | None = None) -> Call[m.FactList]:
    return Call("POST", "/v1/facts/search", m.FactList, _body(query=query, limit=limit))


def facts_forget(key: str, *, category: str | None = None) -> Call[m.Forgotten]:
    return Call("POST", "/v1/facts/forget", m.Forgotten, _body(key=key, category=category))


def facts_list(**query: Any) -> Call[m.FactList]:
    return Call("GET", "/v1/facts", m.FactList, params=_body(**query))


# context
def context(
    message: str = "",
    *,
    policy: Literal["auto", "tools", "summary", "sections"] = "auto",
    token_budget: int | None = None,
    chat: dict[str, str] | None = None,
    agent_run_id: str | None = None,
) -> Call[m.Context]:
    body = _body(
        message=message,
        policy=policy,
        token_budget=token_budget,
        chat=chat,
        agent_run_id=agent_run_id,
    )
    return Call("POST", "/v1/context", m.Context, body)


# episodes (Nous)
def episodes_recall(query: str, *, limit: int | None = None) -> Call[m.EpisodeRecall]:
    return Call("POST", "/v1/episodes/search", m.EpisodeRecall, _body(query=query, limit=limit))


def episodes_list(
    *, status: Literal["open", "closed"] | None = None, limit: int = 50, offset: int = 0
) -> Call[m.EpisodeList]:
    params = _body(status=status, limit=limit, offset=offset)
    return Call("GET", "/v1/episodes", m.EpisodeList, params=params)


def episodes_get(episode_id: str, *, turns: int | None = None) -> Call[m.Episode]:
    return Call("GET", f"/v1/episodes/{episode_id}", m.Episode, params=_body(turns=turns))


# messages
def messages_search(
    query: str,
    *,
    limit: int | None = None,
    mode: str | None = None,
    chat_id: str | None = None,
    episode_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> Call[m.MessageSearch]:
    body = _body(
        query=query,
        limit=limit,
        mode=mode,
        chat_id=chat_id,
        episode_id=episode_id,
        since=since,
        until=until,
    )
    return Call("POST", "/v1/messages/search", m.MessageSearch, body)


# people
def people_list() -> Call[m.People]:
    return Call("GET", "/v1/people", m.People)


def people_resolve(reference: str, *, content_hint: str | None = None) -> Call[m.PersonResolved]:
    body = _body(reference=reference, content_hint=content_hint)
    return Call("POST", "/v1/people", m.PersonResolved, body)


# tools
def tools_list(format: Literal["all", "openai", "anthropic"] = "all") -> Call[m.Tools]:
    return Call("GET", "/v1/tools", m.Tools, params={"format": format})


def tools_call(name: str, arguments: Any = None, *, id: str | None = None) -> Call[m.ToolResult]:
    body = _body(name=name, arguments=arguments, id=id)
    return Call("POST", "/v1/tools/call", m.ToolResult, body)


# thread checkpoints (Jarvus; LangGraph's checkpointer in engram_langgraph)
def _thread(thread_id: str) -> str:
    return f"/v1/threads/{quote(thread_id, safe='')}/checkpoints"


def checkpoints_put(
    thread_id: str,
    checkpoint_id: str,
    state: dict[str, Any],
    *,
    checkpoint_ns: str = "",
    parent_id: str | None = None,
    agent_id: str | None = None,
) -> Call[m.Checkpoint]:
    """Save (or replace) a checkpoint with exactly this parent; none starts a lineage."""
    body = _body(state=state, checkpoint_ns=checkpoint_ns, parent_id=parent_id, agent_id=agent_id)
    path = f"{_thread(thread_id)}/{quote(checkpoint_id, safe='')}"
    return Call("PUT", path, m.Checkpoint, body)


def checkpoints_put_writes(
    thread_id: str,
    checkpoint_id: str,
    task_id: str,
    writes: list[dict[str, Any]],
    *,
    checkpoint_ns: str = "",
    task_path: str = "",
    replace: bool = False,
) -> Call[m.WritesStored]:
    """Store a task's writes (``[{"idx", "channel", "value"}]``) against a checkpoint."""
    body = {
        "checkpoint_ns": checkpoint_ns,
        "task_id": task_id,
        "task_path": task_path,
        "writes": writes,
        "replace": replace,
    }
    path = f"{_thread(thread_id)}/{quote(checkpoint_id, safe='')}/writes"
    return Call("PUT", path, m.WritesStored, body)


def checkpoints_query(
    *,
    thread_id: str | None = None,
    checkpoint_ns: str | None = None,
    checkpoint_id: str | None = None,
    contains: dict[str, Any] | None = None,
    before: str | None = None,
    limit: int = 100,
    writes: bool = False,
) -> Call[m.Checkpoints]:
    """The user's checkpoints that match, newest first (``writes``: with pending writes)."""
    body = _body(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        contains=contains,
        before=before,
        limit=limit,
        writes=writes,
    )
    return Call("POST", "/v1/checkpoints/query", m.Checkpoints, body)


def checkpoints_latest(thread_id: str) -> Call[m.Checkpoint]:
    return Call("GET", f"{_thread(thread_id)}/latest", m.Checkpoint)


def checkpoints_delete_thread(thread_id: str) -> Call[m.Model]:
    """Delete the thread's checkpoints and writes (404 when it has none)."""
    return Call("DELETE", _thread(thread_id), m.Model)


def checkpoints_delete_matching(contains_any: list[dict[str, Any]]) -> Call[m.CheckpointsDeleted]:
    """Delete the checkpoints whose state contains any of these JSON objects."""
    body = {"contains_any": contains_any}
    return Call("POST", "/v1/checkpoints/delete", m.CheckpointsDeleted, body)


def checkpoints_prune(
    thread_ids: list[str], *, keep: Literal["latest", "none"] = "latest"
) -> Call[m.CheckpointsDeleted]:
    body = {"thread_ids": thread_ids, "keep": keep}
    return Call("POST", "/v1/checkpoints/prune", m.CheckpointsDeleted, body)


def checkpoints_copy(thread_id: str, to_thread_id: str) -> Call[m.ThreadCopied]:
    body = {"to_thread_id": to_thread_id}
    return Call("POST", f"{_thread(thread_id)}/copy", m.ThreadCopied, body)


# store (LangGraph's BaseStore in engram_langgraph): items by (namespace, key)
def store_put(
    namespace: list[str], key: str, value: dict[str, Any], *, index: list[str] | None = None
) -> Call[m.StoreItem]:
    """Save ``value`` under (namespace, key); ``index``: the fields to embed (else all)."""
    body = _body(namespace=namespace, key=key, value=value, index=index)
    return Call("PUT", "/v1/store/items", m.StoreItem, body)


def store_get(namespace: list[str], key: str) -> Call[m.StoreItem]:
    body = {"namespace": namespace, "key": key}
    return Call("POST", "/v1/store/items/get", m.StoreItem, body)


def store_delete(namespace: list[str], key: str) -> Call[m.StoreDeleted]:
    body = {"namespace": namespace, "key": key}
    return Call("POST", "/v1/store/items/delete", m.StoreDeleted, body)


def store_search(
    namespace_prefix: list[str],
    *,
    query: str | None = None,
    filter: dict[str, Any] | None = None,
    limit: int = 10,
    offset: int = 0,
) -> Call[m.StoreItems]:
    body = _body(
        namespace_prefix=namespace_prefix, query=query, filter=filter, limit=limit, offset=offset
    )
    return Call("POST", "/v1/store/search", m.StoreItems, body)


def store_namespaces(
    *,
    prefix: list[str] | None = None,
    suffix: list[str] | None = None,
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
) -> Call[m.StoreNamespaces]:
    body = _body(prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset)
    return Call("POST", "/v1/store/namespaces", m.StoreNamespaces, body)


# conversation turns (published to the pipeline like a chat platform's)
def turns_publish(
    chat_id: str,
    role: Literal["user", "assistant", "tool", "system"],
    content: str = "",
    *,
    display_name: str | None = None,
    external_message_id: str | None = None,
    occurred_at: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Call[m.TurnPublished]:
    """Publish one turn of the user's own chat ``chat_id`` to engram's ``turns`` stream;
    listed once ingest stored it. ``external_message_id`` stores a retried publish once."""
    body = _body(
        chat_id=chat_id,
        role=role,
        content=content,
        display_name=display_name,
        external_message_id=external_message_id,
        occurred_at=occurred_at,
        metadata=metadata,
    )
    return Call("POST", "/v1/turns", m.TurnPublished, body)


def turns_list(chat_id: str, *, limit: int = 100) -> Call[m.Turns]:
    """The chat's last ``limit`` stored turns, oldest first."""
    body = {"chat_id": chat_id, "limit": limit}
    return Call("POST", "/v1/turns/list", m.Turns, body)


def turns_delete(chat_id: str) -> Call[m.TurnsDeleted]:
    body = {"chat_id": chat_id}
    return Call("POST", "/v1/turns/delete", m.TurnsDeleted, body)
