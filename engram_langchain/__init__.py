"""engram from LangChain: a retriever over engram's search and context
(:class:`EngramRetriever`), and a chat message history that publishes turns to engram's
pipeline and reads them back (:class:`EngramChatMessageHistory`).

    from engram_langchain import EngramChatMessageHistory, EngramRetriever

    retriever = EngramRetriever(base_url="http://127.0.0.1:8000", api_key="eng_...", k=5)
    docs = retriever.invoke("what does Sam like to eat?")
    history = EngramChatMessageHistory("chat-1", "http://127.0.0.1:8000", "eng_...")
    history.add_user_message("I moved to Lisbon")
"""

from engram_langchain.history import EngramChatMessageHistory
from engram_langchain.retriever import EngramRetriever

__all__ = ["EngramChatMessageHistory", "EngramRetriever"]
