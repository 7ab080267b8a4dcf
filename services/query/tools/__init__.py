"""The LLM tools: each tool's row (spec, request models, handlers) in the module of its
behaviour, the one validator and the listing and dispatch (``registry``); the table
that lists the rows is ``services.query.app.TOOLBOX``."""
