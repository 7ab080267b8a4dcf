"""The API's routes, one module per behaviour; ``create_app`` (``services/query/app.py``,
``ROUTERS``) mounts each by name, so a new route module is one more line there."""
