"""engram's memory tools over MCP (the official ``mcp`` SDK).

One tool list and one dispatch: the tools are the app's tool table
(:data:`services.query.app.TOOLBOX`, the one ``GET /v1/tools`` lists) and
a call runs what ``POST /v1/tools/call`` runs. Two transports:

- streamable HTTP at ``/mcp`` on the query service (:mod:`.http`), scoped by the
  caller's API key (``Authorization: Bearer``; an admin key names the user with
  ``X-Engram-User``);
- stdio (``engram_cli/mcp_stdio.py``, ``engram mcp --key ...``), a local process that forwards
  each call to a query service's ``/v1/tools`` with the key.
"""
