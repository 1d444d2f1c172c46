"""Which page a URL shows: the dashboard's frame and its one routing callback.

Each page module offers ``ROUTES`` (its FastAPI path patterns), ``match(path)`` (its path
parameters, or None), ``layout(data, who, query, **path_params)`` and
``register(app, data)``. The URL's ``pathname`` picks the page; its query parameters
(a :class:`Query`: the last of each name, and every value of a repeated one) go to the
page's layout.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

import dash
from dash import Input, Output, State, dcc, html

from normwatch.server.auth import Principal

from .data import DashboardData
from .pages import alerts as alerts_page
from .pages import compare as compare_page
from .pages import rules as rules_page
from .pages import run as run_page
from .pages import runs as runs_page
from .refusals import RunNotFound
from .session import viewer
from .wiring import in_thread

__all__ = ["PAGES", "Query", "frame", "not_found", "query_of", "register", "route"]

PAGES = (runs_page, run_page, alerts_page, rules_page, compare_page)


def frame() -> html.Div:
    """What every page shares: the URL, the top bar, and ``main`` where the page goes."""
    return html.Div(
        [
            dcc.Location(id="url", refresh="callback-nav"),
            html.Header(
                [
                    dcc.Link("normwatch", href="/", className="brand"),
                    dcc.Link("runs", href="/", className="nav", id="nav-runs"),
                    dcc.Link("alerts", href="/alerts", className="nav", id="nav-alerts"),
                    dcc.Link("rules", href="/rules", className="nav", id="nav-rules"),
                    html.Span(id="viewer", className="viewer"),
                    # A form, not a link: logging out changes state, so it is a POST
                    # (a page elsewhere cannot log a visitor out with an image or a link).
                    html.Form(
                        html.Button("log out", type="submit", id="logout", className="logout"),
                        method="post",
                        action="/logout",
                        className="logout-form",
                    ),
                ],
                className="topbar",
            ),
            html.Main(id="page"),
        ]
    )


class Query(dict[str, str]):
    """A URL's query parameters: the last value of each name, as a dict, and every value of
    a name, in order, from :meth:`every` (a page that takes a list: ``?run=a&run=b``)."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        pairs = list(pairs)
        super().__init__(pairs)
        self._every: dict[str, list[str]] = {}
        for name, value in pairs:
            self._every.setdefault(name, []).append(value)

    def every(self, name: str) -> list[str]:
        """Every value of ``name`` that is not empty, in the URL's order (``[]`` when it
        has none).

        >>> query_of("?run=a&metric=m&run=&run=b").every("run")
        ['a', 'b']
        """
        return [value for value in self._every.get(name, ()) if value]


def query_of(search: object) -> Query:
    """``?a=1&b=2`` as ``{"a": "1", "b": "2"}`` (the last value of a repeated name; all of
    them from :meth:`Query.every`).

    A name with no value is kept, as ``""`` (``right=``: the right axis left empty).

    >>> query_of("?left=grad%2Fnorm%2Ftotal&log=1&log=0&right=")
    {'left': 'grad/norm/total', 'log': '0', 'right': ''}
    """
    if not isinstance(search, str):
        return Query()
    return Query(parse_qsl(search.lstrip("?"), keep_blank_values=True))


def not_found(path: str) -> html.Div:
    return html.Div(
        [
            html.H2("Not found"),
            html.P(f"Nothing at {path} in your project."),
            dcc.Link("All runs", href="/"),
        ],
        className="card",
    )


def route(data: DashboardData, who: Principal, pathname: object, search: object) -> tuple[Any, str]:
    """The page at ``pathname`` (its layout, read for ``who``) and the top bar's viewer text.

    A path no page matches, and a run outside the viewer's project, show :func:`not_found`.
    """
    path = pathname if isinstance(pathname, str) and pathname else "/"
    for page in PAGES:
        found = page.match(path)
        if found is not None:
            try:
                layout = page.layout(data, who, query_of(search), **found)
            except RunNotFound:
                layout = not_found(path)
            return layout, f"project {who.project} · {who.scope}"
    return not_found(path), f"project {who.project}"


def register(app: dash.Dash, data: DashboardData) -> None:
    """Wire the routing callback and every page's callbacks."""

    @app.callback(
        Output("page", "children"),
        Output("viewer", "children"),
        Input("url", "pathname"),
        State("url", "search"),
    )
    async def on_navigate(pathname: object, search: object) -> tuple[Any, str]:
        return await in_thread(route, data, viewer(), pathname, search)

    for page in PAGES:
        page.register(app, data)
