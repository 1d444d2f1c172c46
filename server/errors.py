"""The refusals a service function raises for the caller's mistakes, by HTTP status.

::

    ServiceError               4xx with a message; never logged as an error
     ├── NotFound              404  no such object
     ├── Forbidden             403  another project's object, or a scope too narrow
     ├── Conflict              409  clashes with what is stored (a rule name taken)
     ├── TooLarge              413  over a size limit; the message names the limit
     └── Invalid               422  well-formed but unacceptable (also a ValueError)

The HTTP layer turns them, and every other failure, into answers in one place:
:mod:`normwatch.server.api.errors`. Nothing here depends on the web framework, so the
storage and parsing layers raise these too.
"""

from __future__ import annotations

__all__ = ["Conflict", "Forbidden", "Invalid", "NotFound", "ServiceError", "TooLarge"]


class ServiceError(Exception):
    """A request the service will not carry out; ``str()`` tells the caller why."""

    status_code = 400


class NotFound(ServiceError, LookupError):
    status_code = 404


class Forbidden(ServiceError):
    status_code = 403


class Conflict(ServiceError):
    status_code = 409


class TooLarge(ServiceError):
    status_code = 413


class Invalid(ServiceError, ValueError):
    status_code = 422
