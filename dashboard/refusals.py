"""What a page says when the service refuses: the one place a refusal becomes words.

Every refusal the dashboard meets is an :class:`~normwatch.server.errors.ServiceError`
(the tree of :mod:`normwatch.server.errors`, the API's 4xx answers), raised by the services
and by `services.access`, which decides who may do what for the API and the dashboard alike.
The data layer (:mod:`.data`) passes them on untouched; a page catches `RunNotFound` where
it has a not-found view of its own, then `Refusal`, and shows `said`. A page that can draw
some of what it was asked catches `UnknownMetrics` first (names the run never logged,
with the closest ones it has: ``unknown`` and ``suggestions``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from normwatch.server.errors import Invalid, RunNotFound, ServiceError, UnknownMetrics

__all__ = ["NO_SUCH_RUN", "Refusal", "RunNotFound", "UnknownMetrics", "invalid", "said"]

Refusal = ServiceError
"""What a page catches: any refusal of the service."""

NO_SUCH_RUN = "No such run in your project"
"""What a not-found view says for `RunNotFound`: the viewer's project has no such run
(another project's runs look the same)."""


def said(exc: ServiceError) -> str:
    """The words a page shows for a refusal: the service's own, as the API's ``detail``
    (a page with a not-found view of its own shows that for `RunNotFound` instead)."""
    return str(exc)


def invalid(
    exc: ValidationError, field: str | None = None, names: Mapping[str, str] | None = None
) -> Invalid:
    """A form the dashboard's own check refused, as the service would refuse it:
    "<field>: <the first fault>". The field is ``field``, else the first fault's place as
    the form names it (``names``: the model's field to the form's word)."""
    first = exc.errors()[0]
    if field is None:
        where = ".".join(str(p) for p in first["loc"])
        field = (names or {}).get(where, where)
    return Invalid(f"{field}: {first['msg']}")
