"""engram as LangGraph's memory: a checkpointer (:class:`EngramSaver`, short-term thread
state) and a store (:class:`EngramStore`, long-term namespaced memories with search).

    from engram_langgraph import EngramSaver, EngramStore

    saver = EngramSaver("http://127.0.0.1:8000", "eng_...")
    store = EngramStore("http://127.0.0.1:8000", "eng_...")
    graph = builder.compile(checkpointer=saver, store=store)

Both talk to engram's HTTP API through :mod:`engram_client`; neither reads engram's
database.
"""

from engram_langgraph.checkpoint import EngramSaver
from engram_langgraph.store import EngramStore

__all__ = ["EngramSaver", "EngramStore"]
