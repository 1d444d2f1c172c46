"""The run page's "Panels" section: one small chart per metric the run logged, grouped by
name prefix (`..panels.arrange`), drawn as they scroll into view (`.run_panels_draw`).

Each panel can be moved up or down in its group, pinned (the pinned group comes first) or
hidden (listed under "hidden (n)" to show again); an expression panel
(``ratio(grad/norm/total, params/norm/total)``) can be added. The layout is the project's,
saved on the server (`..workspace.WorkspaceData`, ``/api/v1/projects/{project}/workspace``)
so that everyone who views its runs sees it; a viewer whose token may not save it (saving
needs an admin token) keeps the change on this page until it is reloaded, and is told so.
Every panel follows the page's view: zooming or panning one sets the view's range (as the
overlay's zoom does), and the overlay and every drawn panel follow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import dash
from dash import ALL, Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from normwatch.server.analytics.derived import is_derived
from normwatch.server.auth import Principal

from ..panels import (
    PAGE,
    PINNED,
    Group,
    Layout,
    arrange,
    layout_of,
    page_of,
    paged,
)
from ..session import viewer
from ..wiring import clicked_row, in_thread, or_prevent, triggered_id
from .run_panels_draw import draw_panels
from .run_panels_layout import WorkspaceReads, change_layout, names_of, new_names
from .run_panels_scripts import OBSERVE_JS, PANEL_ZOOM_JS, PANELS_TICK_JS
from .run_view import RunView

__all__ = ["WorkspaceReads", "arranged", "change_layout", "groups_view", "register", "section"]


def section(data: WorkspaceReads, who: Principal, names: Sequence[str]) -> html.Div:
    """The section for a run that logged ``names``, in the project's saved layout."""
    layout = data.workspace(who)
    return html.Div(
        [
            html.H3("Panels"),
            html.Div(
                [
                    dcc.Input(
                        id="panel-expression",
                        type="text",
                        debounce=True,
                        placeholder="add a panel: share(grad/norm/lm_head*, grad/norm/total)",
                        className="expression",
                    ),
                    html.Button("add panel", id="panel-add", n_clicks=0),
                ],
                className="controls",
            ),
            html.Div(id="panel-note", className="muted"),
            html.Div(groups_view(names, layout), id="panel-groups"),
            dcc.Store(id="panel-layout", data=layout.model_dump()),
            dcc.Store(id="panel-names", data={"names": list(names), "version": None}),
            dcc.Store(id="panel-arranged", data=arranged(names, layout)),
            dcc.Store(id="panel-pages", data={}),
            dcc.Store(id="panel-click"),
            dcc.Store(id="panels-seen", data=[]),
            dcc.Store(id="panels-drawn", data={}),
            dcc.Store(id="panels-tick"),
            html.Div(id="panels-tick-sync", hidden=True),
            html.Div(id="panels-observe-sync", hidden=True),
            html.Div(id="panels-zoom-sync", hidden=True),
        ],
        className="panels-section",
    )


def _button(text: str, act: str, key: str, tip: str) -> html.Button:
    """A panel's button: no Dash id of its own (`CLICKS_JS` hears every click of the
    section), so that 300 panels are not 1,200 components a callback listens to."""
    return html.Button(text, title=tip, className="small", **_data(act=act, key=key))


def _panel(key: str, pinned_now: bool) -> html.Div:
    head = [
        html.Span(key, className="panel-name", title=key),
        _button("↑", "up", key, "move up"),
        _button("↓", "down", key, "move down"),
        _button("unpin" if pinned_now else "pin", "unpin" if pinned_now else "pin", key, ""),
        _button("hide", "hide", key, "hide this panel"),
    ]
    if is_derived(key):
        head.append(_button("remove", "remove", key, "remove this expression panel"))
    return html.Div(
        [
            html.Div(head, className="panel-head"),
            html.Div("…", id={"type": "panel-body", "key": key}, className="panel-body"),
        ],
        className="panel",
        **_data(key=key),
    )


def _data(**attributes: str) -> dict[str, Any]:
    """``data-*`` attributes of an element, for the page's script (``data-key``...)."""
    return {f"data-{name}": value for name, value in attributes.items()}


def arranged(names: Sequence[str], layout: Layout, pages: object = None) -> str:
    """What the panels shown depend on (groups, their panels shown, the hidden ones), as
    text: a change of the layout that leaves it as it is (a group folded) redraws nothing."""
    groups, hidden = arrange(names, layout)
    return json.dumps([[[g.name, len(g.keys), *paged(g, pages)] for g in groups], hidden])


def groups_view(names: Sequence[str], layout: Layout, pages: object = None) -> list[Any]:
    """The groups of panels, each folded under its name and count and showing the pages
    ``pages`` says (`..panels.paged`), and the hidden list."""
    groups, hidden = arrange(names, layout)
    if not groups and not hidden:
        return [html.P("This run has no metrics yet.", className="muted")]
    shown: list[Any] = [_group(g, g.name in layout.collapsed, pages) for g in groups]
    if hidden:
        rows = [html.Li([_button("show", "show", k, "show again"), " ", k]) for k in hidden]
        shown.append(
            html.Details(
                [html.Summary(f"hidden ({len(hidden)})"), html.Ul(rows)],
                id="panel-hidden",
                className="panel-group",
            )
        )
    return shown


def _group(group: Group, folded: bool, pages: object) -> html.Details:
    keys = paged(group, pages)
    more: list[Any] = []
    if len(keys) < len(group.keys):
        left = min(PAGE, len(group.keys) - len(keys))
        more = [
            html.Button(
                f"show {left} more ({len(keys)} of {len(group.keys)} shown)",
                className="small panel-more",
                **_data(act="more", key=group.name),
            )
        ]
    return html.Details(
        [
            # A click folds or opens the group (the browser's own toggle) and saves it.
            html.Summary(f"{group.name} ({len(group.keys)})", **_data(act="fold", key=group.name)),
            html.Div([_panel(k, group.name == PINNED) for k in keys], className="panel-grid"),
            *more,
        ],
        open=not folded,
        className="panel-group",
        **_data(group=group.name),
    )


def register(app: dash.Dash, data: WorkspaceReads) -> None:
    app.clientside_callback(
        OBSERVE_JS, Output("panels-observe-sync", "children"), Input("panel-groups", "children")
    )
    app.clientside_callback(
        PANELS_TICK_JS,
        Output("panels-tick-sync", "children"),
        Input("draw-tick", "data"),
        prevent_initial_call=True,
    )
    app.clientside_callback(
        PANEL_ZOOM_JS,
        Output("panels-zoom-sync", "children"),
        Input({"type": "panel-graph", "key": ALL}, "relayoutData"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("panel-layout", "data"),
        Output("panel-note", "children"),
        Output("panel-expression", "value"),
        Input("panel-click", "data"),
        Input("panel-add", "n_clicks"),
        Input("panel-expression", "n_submit"),
        State("panel-expression", "value"),
        State("panel-layout", "data"),
        State("panel-names", "data"),
        prevent_initial_call=True,
    )
    async def on_change(
        click: object, _add: object, _submit: object, text: object, store: object, names: object
    ) -> tuple[Any, str, Any]:
        trigger, real = clicked_row(click)
        adding = triggered_id() in ("panel-add", "panel-expression")
        act = "add" if adding else (trigger.get("act") if isinstance(trigger, Mapping) else None)
        if not adding and not real:
            act = None
        key = trigger.get("key") if isinstance(trigger, Mapping) else None
        changed = await in_thread(
            change_layout, data, viewer(), store, names, act=act, key=key, expression=text
        )
        new, note = or_prevent(changed)
        return new, note, "" if adding and not note.startswith("Not added") else dash.no_update

    @app.callback(
        Output("panel-groups", "children"),
        Output("panels-drawn", "data"),
        Output("panel-arranged", "data"),
        Input("panel-layout", "data"),
        Input("panel-names", "data"),
        Input("panel-pages", "data"),
        State("panel-arranged", "data"),
        prevent_initial_call=True,
    )
    def on_layout(store: object, names: object, pages: object, shown: object) -> tuple[Any, ...]:
        run_names = names_of(names)
        layout = layout_of(store)
        now = arranged(run_names, layout, pages)
        # A group folded (the browser has already folded it), or no new metric.
        if now == shown:
            raise PreventUpdate
        return groups_view(run_names, layout, pages), {}, now

    @app.callback(
        Output("panel-pages", "data"),
        Input("panel-click", "data"),
        State("panel-pages", "data"),
        prevent_initial_call=True,
    )
    def on_more(click: object, pages: object) -> dict[str, int]:
        trigger, real = clicked_row(click)
        if not (real and isinstance(trigger, Mapping) and trigger.get("act") == "more"):
            raise PreventUpdate
        group = trigger.get("key")
        if not isinstance(group, str) or len(group) > 128:
            raise PreventUpdate
        now = (
            {k: v for k, v in pages.items() if isinstance(k, str)}
            if isinstance(pages, dict)
            else {}
        )
        return {**now, group: page_of(pages, group) + 1}

    @app.callback(
        Output("panel-names", "data"),
        Input("draw-tick", "data"),
        State("ticks-seen", "data"),
        State("panel-names", "data"),
        State("view", "data"),
        prevent_initial_call=True,
    )
    async def on_new_metrics(_tick: object, ticks: object, names: object, store: object) -> Any:
        view = RunView.from_store(store)
        found = await in_thread(new_names, data, viewer(), view, ticks, names)
        return or_prevent(found)

    @app.callback(
        Output({"type": "panel-body", "key": ALL}, "children"),
        Output("panels-drawn", "data", allow_duplicate=True),
        Input("panels-seen", "data"),
        Input("view-drawn", "data"),
        Input("panels-tick", "data"),
        State({"type": "panel-body", "key": ALL}, "id"),
        State("panels-drawn", "data"),
        State("ticks-seen", "data"),
        prevent_initial_call=True,
    )
    async def on_draw(
        seen: object, store: object, _tick: object, ids: object, drawn: object, ticks: object
    ) -> tuple[list[Any], dict[str, str]]:
        view = RunView.from_store(store)
        drawn_now = await in_thread(draw_panels, data, viewer(), view, ids, seen, drawn, ticks)
        return or_prevent(drawn_now)
