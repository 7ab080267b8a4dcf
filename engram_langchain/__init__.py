"""engram from LangChain: a retriever over engram's search and context, and a chat
message history that publishes turns to engram (so its pipeline learns from them)."""
