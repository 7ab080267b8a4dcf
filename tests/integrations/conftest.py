from tests.live import live_query

__all__ = ["live_query"]
