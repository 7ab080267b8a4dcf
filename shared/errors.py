"""engram's exception tree.

EngramError
├── ConfigError          settings that cannot work (bad URL, missing binary)
├── InfrastructureError  a server we depend on failed (PostgreSQL, Redis, a provider)
│   └── ProviderError    an embedding or language-model endpoint refused: permanent
│       └── ProviderUnavailable  timeouts, 429, 502-504 after retries: an outage
├── InvalidEvent         an event that cannot be parsed or validated: dead-letter it at once
├── InvalidModelOutput   a language model kept answering with output that breaks its schema
├── NotFound             the thing asked for does not exist for this user
├── UserErased           the user was erased; nothing is stored for them until re-enabled
└── InvalidRequest       a caller's input breaks a rule (maps to HTTP 4xx)

``retryable`` says whether trying the same work later can succeed: True for an
outage (``InfrastructureError``, ``ProviderUnavailable``), False for a refusal
(``ProviderError``: a 401, a 400, a 500 that keeps coming). Stream consumers decide
by it (``shared.streams.FailurePolicy``): an outage waits with backoff and is never
dead-lettered; a refusal counts attempts and is dead-lettered after
``max_attempts``. A read path (search, recall) degrades on any
``InfrastructureError``, refusal or outage alike.

Driver errors are translated at the boundary with ``raise ... from exc``.
"""


class EngramError(Exception):
    """Base of every error engram raises on purpose."""

    retryable = False


class ConfigError(EngramError):
    """Settings that cannot work."""


class InfrastructureError(EngramError):
    """A server engram depends on failed."""

    retryable = True


class ProviderError(InfrastructureError):
    """An embedding or language-model endpoint refused the request (permanent)."""

    retryable = False


class ProviderUnavailable(ProviderError):
    """The provider is down or throttling; the work should be retried later."""

    retryable = True


class InvalidEvent(EngramError):
    """An event that cannot be parsed or does not match its schema."""


class InvalidModelOutput(EngramError):
    """A language model's answer did not validate, even after asking again.

    Not an infrastructure error: retrying later gives the same answer, so the
    caller records it (e.g. on the episode) instead of looping."""


class NotFound(EngramError):
    """The requested object does not exist for this user."""


class UserErased(EngramError):
    """The user was erased (``DELETE /v1/users/{id}``): nothing is stored for the id
    until an admin re-enables it (``engram users reenable ID``)."""


class InvalidRequest(EngramError):
    """A caller's input breaks a rule; the message says which."""
