"""engram's memory tools over MCP (the official ``mcp`` SDK).

One tool list and one dispatch: the tools are :data:`services.query.tools.toolbox.TOOLS`
(the ones ``GET /v1/tools`` lists) and a call runs what ``POST /v1/tools/call``
runs. Two transports:

- streamable HTTP at ``/mcp`` on the query service (:mod:`.http`), scoped by the
  caller's API key (``Authorization: Bearer``; an admin key names the user with
  ``X-Engram-User``);
- stdio (:mod:`.stdio`, ``engram mcp --key ...``), a local process that forwards
  each call to a query service's ``/v1/tools`` with the key.
"""
