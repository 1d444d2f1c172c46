"""Every refusal of a caller's request, by HTTP status: the one tree the service raises.

::

    ServiceError                 400  a request the service will not carry out
     ├── Unauthenticated         401  no token, or one that is unknown, revoked or expired
     ├── Forbidden               403  another project's object, or a scope too narrow
     ├── NotFound                404  no such object
     │    ├── RunNotFound        404  no such run (for the dashboard, none in the viewer's project)
     │    └── UnknownMetrics     404  metric names, globs or prefixes the run never logged
     ├── Conflict                409  clashes with what is stored (a rule name taken)
     │    └── TokenRevoked       409  a revoked token has no successor
     ├── TooLarge                413  over a size limit; the message names the limit
     ├── Unsupported             415  a body in an encoding the service does not read
     └── Invalid                 422  well-formed but unacceptable (also a ValueError)
          ├── GlobError          422  a metric glob that cannot be matched
          └── BatchError         422  a metric batch that cannot be stored
               ├── BodyNotJson   400  the body is not JSON at all
               ├── BatchTooLarge 413  over the batch size limits
               └── TooManyMetrics 422 the run would hold too many metric names

``str()`` of each is the message for the caller; `ServiceError.fields` what its answer
carries besides (`UnknownMetrics`: the names and the closest ones the run has). Nothing
here depends on the web framework, so the parsing, storage and service layers raise these,
and they are turned into answers in one place each: HTTP responses in
:mod:`normwatch.server.api.errors`, the dashboard's messages in
:mod:`normwatch.dashboard.refusals`. Who may do what is decided in one place too,
:mod:`normwatch.server.services.access`.
"""

from __future__ import annotations

__all__ = [
    "BatchError",
    "BatchTooLarge",
    "BodyNotJson",
    "Conflict",
    "Forbidden",
    "GlobError",
    "Invalid",
    "NotFound",
    "RunNotFound",
    "ServiceError",
    "TokenRevoked",
    "TooLarge",
    "TooManyMetrics",
    "Unauthenticated",
    "UnknownMetrics",
    "Unsupported",
]


class ServiceError(Exception):
    """A request the service will not carry out; ``str()`` tells the caller why. Never
    logged as an error: it is the caller's to fix."""

    status_code = 400

    def fields(self) -> dict[str, object]:
        """What the answer carries besides its message (JSON values); none by default."""
        return {}


class Unauthenticated(ServiceError):
    """No bearer token, or one that is unknown, revoked or expired (answered with
    ``WWW-Authenticate: Bearer``)."""

    status_code = 401


class Forbidden(ServiceError):
    status_code = 403


class NotFound(ServiceError, LookupError):
    status_code = 404


class RunNotFound(NotFound):
    """No run has that id, or (where another project's runs are not to be told apart from
    missing ones: the dashboard) none in the caller's project. ``run_id``: the id asked."""

    def __init__(self, message: str, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class UnknownMetrics(NotFound):
    """Metric names (or globs, or a prefix) that a read names and the run never logged.

    ``unknown``: each as the caller wrote it (a name or glob inside an expression on its
    own); ``suggestions``: for each, the closest names the run has (maybe none);
    ``missing_in``: for a read of several runs, the runs that lack each (None: one run,
    the one the request names). ``what`` says what the names are ("metric", "prefix").

    >>> print(UnknownMetrics(["grad/norm/totl"], {"grad/norm/totl": ["grad/norm/total"]}))
    no metric 'grad/norm/totl' in this run (closest: 'grad/norm/total')
    >>> print(UnknownMetrics(["grad/nrom/*"], {"grad/nrom/*": []}))
    'grad/nrom/*' matches no metric of this run
    """

    def __init__(
        self,
        unknown: list[str],
        suggestions: dict[str, list[str]],
        *,
        missing_in: dict[str, list[str]] | None = None,
        what: str = "metric",
    ) -> None:
        self.unknown = list(unknown)
        self.suggestions = {name: list(suggestions.get(name, ())) for name in self.unknown}
        self.missing_in = missing_in
        self.what = what
        super().__init__("; ".join(self._said(name) for name in self.unknown))

    def _said(self, name: str) -> str:
        runs = None if self.missing_in is None else self.missing_in.get(name)
        if runs is None:
            where = "this run"
        else:
            where = ("run " if len(runs) == 1 else "runs ") + ", ".join(runs)
        if self.what == "prefix":
            text = f"no metric under {name!r} in {where}"
        elif any(c in name for c in "*?["):
            text = f"{name!r} matches no metric of {where}"
        else:
            text = f"no metric {name!r} in {where}"
        closest = self.suggestions.get(name)
        if closest:
            text += " (closest: " + ", ".join(repr(c) for c in closest) + ")"
        return text

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {"unknown": self.unknown, "suggestions": self.suggestions}
        if self.missing_in is not None:
            out["missing_in"] = self.missing_in
        return out


class Conflict(ServiceError):
    status_code = 409


class TokenRevoked(Conflict):
    """A revoked token has no successor: create a new one instead."""


class TooLarge(ServiceError):
    status_code = 413


class Unsupported(ServiceError):
    """A body the service cannot read (an unknown ``Content-Encoding``)."""

    status_code = 415


class Invalid(ServiceError, ValueError):
    status_code = 422


class GlobError(Invalid):
    """A glob that cannot be matched: too long, too many wildcards, or an empty range."""


class BatchError(Invalid):
    """A batch that cannot be stored; ``str()`` says which field and index, and why."""


class BodyNotJson(BatchError):
    """The body does not decode as JSON at all."""

    status_code = 400


class BatchTooLarge(BatchError):
    """The batch is well-formed but over the configured size."""

    status_code = 413


class TooManyMetrics(BatchError):
    """A batch would take its run past the configured number of metric names."""
