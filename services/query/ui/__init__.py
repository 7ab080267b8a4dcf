"""The memory browser: a read-only web UI under ``/ui`` (Jinja2 pages, HTMX fragments).

``create_app`` (``services/query/app.py``, ``BROWSER``) mounts its pages after the
API routers; see ``docs/browser.md``.
"""
