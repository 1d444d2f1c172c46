"""The private parts of Dash the dashboard relies on, each in one function here.

Checked against Dash 4.4.1 with its FastAPI backend (``dash[fastapi]``); an upgrade of Dash
should start by re-reading ``dash/backends/_fastapi.py`` and ``Dash._setup_server``
(``tests/dashboard/test_dash_internals.py`` fails when a name used here is gone).

Dash serves its pages as Dash "pages" or from one catch-all route; the dashboard instead
serves each page URL from a real FastAPI route (unknown paths are a plain 404, and the app
holds no per-process page registry). Dash's FastAPI backend has no public way to do three
things that needs:

- :func:`render_index`: ``Dash.index()`` reads "the current request" through the backend's
  request adapter, and only Dash's middleware sets it, only for Dash's own paths (``/`` and
  ``/_dash-*``). A page route of ours sets it with ``set_current_request`` /
  ``reset_current_request`` of ``dash.backends._fastapi``.
- :func:`finish_setup` (called by :func:`render_index`): Dash finishes its setup (walks the
  assets folder, builds the script and stylesheet tags, merges callbacks) in
  ``Dash._setup_server``, a before-request hook run by the same middleware, again only for
  Dash's own paths. A deep link may be the first request a process serves, and would get a
  page without the stylesheet. The method returns at once after its first run.
- :func:`disable_catchall`: at startup Dash's middleware calls the backend's
  ``_setup_catchall()``, which adds ``GET /{path:path}`` answering any unknown path with
  the index (200). The public ``setup_catchall`` is a no-op on this backend and there is no
  option to leave the route out, so this app's backend gets a no-op in its place.

Looked for and not usable: ``dash.hooks.route`` and ``dash.hooks.setup`` (process-wide
hooks; their routes do not get the current request either), ``Dash(use_pages=True)``
(a process-wide page registry and Dash's own catch-all routing).
"""

from __future__ import annotations

from typing import Any

import dash
from dash.backends._fastapi import reset_current_request, set_current_request
from fastapi import Request

__all__ = ["CHECKED_WITH", "callback_map", "disable_catchall", "finish_setup", "render_index"]

CHECKED_WITH = "4.4.1"
"""The Dash version these calls were read against."""


def disable_catchall(app: dash.Dash) -> None:
    """Keep Dash from adding its ``GET /{path:path}`` route to the server at startup."""
    app.backend._setup_catchall = _no_catchall  # type: ignore[attr-defined]


def _no_catchall() -> None:
    """Page URLs are real routes; any other path stays a 404."""


def finish_setup(app: dash.Dash) -> None:
    """Run Dash's once-per-process setup now, if no request of Dash's own has yet."""
    app._setup_server()


def callback_map(app: dash.Dash) -> dict[str, Any]:
    """Dash's callbacks by output, as ``POST /_dash-update-component`` looks them up (each
    with its declared ``inputs`` and ``state``), once its setup has merged them."""
    finish_setup(app)
    callbacks: dict[str, Any] = app.callback_map
    return callbacks


def render_index(app: dash.Dash, request: Request) -> str:
    """The page's HTML (Dash's index) for ``request``, a request to a route of ours."""
    finish_setup(app)
    token = set_current_request(request)
    try:
        page: str = app.index()
    finally:
        reset_current_request(token)
    return page
