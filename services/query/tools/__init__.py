"""The LLM tools: one table of name -> spec, request model, handler."""
