"""A LangGraph agent that remembers across threads, with engram as both its memories.

The checkpointer (EngramSaver) keeps each thread's state in engram's thread
checkpoints, so a thread resumes where it was; the store (EngramStore) keeps what the
user asked to remember in engram's memory, so a new thread finds it. The "model" is a
deterministic node (no LLM): "remember X" stores X; anything else is answered with
the memories the store finds for it.

    ENGRAM_URL=http://127.0.0.1:8000 ENGRAM_KEY=eng_... python -m examples.langgraph_agent
"""

from __future__ import annotations

import operator
import os
import uuid
from typing import Annotated, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from engram_langgraph import EngramSaver, EngramStore


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def respond(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, list[str]]:
    user = config["configurable"]["user"]
    said = state["messages"][-1]
    if said.lower().startswith("remember "):
        fact = said[len("remember ") :]
        store.put(("memories", user), uuid.uuid4().hex, {"text": fact}, index=["text"])
        return {"messages": [f"I'll remember that {fact}."]}
    found = store.search(("memories", user), query=said, limit=3)
    known = [i.value["text"] for i in found if i.score]
    turns = len(state["messages"]) // 2
    if not known:
        return {"messages": [f"I don't know yet ({turns} earlier turns in this thread)."]}
    return {"messages": [f"You told me: {'; '.join(known)} ({turns} earlier turns here)."]}


def build(url: str, key: str) -> CompiledStateGraph[State, None, State, State]:
    graph = StateGraph(State)
    graph.add_node("respond", respond)
    graph.add_edge(START, "respond")
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=EngramSaver(url, key), store=EngramStore(url, key))


def say(agent: CompiledStateGraph[State, None, State, State], thread: str, text: str) -> str:
    config: RunnableConfig = {"configurable": {"thread_id": thread, "user": "sam"}}
    out = agent.invoke({"messages": [text]}, config)
    reply: str = out["messages"][-1]
    print(f"[{thread}] user: {text}\n[{thread}] agent: {reply}")
    return reply


def main() -> None:
    agent = build(os.environ.get("ENGRAM_URL", "http://127.0.0.1:8000"), os.environ["ENGRAM_KEY"])
    monday, tuesday = f"monday-{uuid.uuid4().hex[:6]}", f"tuesday-{uuid.uuid4().hex[:6]}"
    say(agent, monday, "remember my sister Ana lives in Porto")
    say(agent, monday, "remember I drink green tea, never coffee")
    say(agent, tuesday, "what do I drink in the morning? tea or coffee")  # a new thread
    say(agent, tuesday, "where does Ana live?")
    state = agent.get_state({"configurable": {"thread_id": monday}})
    print(f"[{monday}] resumed with {len(state.values['messages'])} messages")


if __name__ == "__main__":
    main()
