"""Python client of engram's query API: sync (:class:`Engram`) and async (:class:`AsyncEngram`).

    from engram_client import Engram

    with Engram("http://127.0.0.1:8000", "eng_...") as memory:
        memory.memory.add("Prefers window seats", type="preference")
        print(memory.memory.search("seat").results)

Answers are pydantic models (:mod:`engram_client.models`); failures raise
:mod:`engram_client.errors` exceptions; 429 and 503 are retried with backoff.
Needs only ``httpx`` and ``pydantic``.
"""

from engram_client._client import AsyncEngram, Engram, RetryPolicy
from engram_client._pair import ClientPair
from engram_client.errors import (
    AuthenticationError,
    BadRequest,
    ConnectionFailed,
    EngramError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ServerError,
    Unavailable,
    ValidationFailed,
)

__all__ = [
    "AsyncEngram",
    "AuthenticationError",
    "BadRequest",
    "ClientPair",
    "ConnectionFailed",
    "Engram",
    "EngramError",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unavailable",
    "ValidationFailed",
]
__version__ = "0.1.0"
