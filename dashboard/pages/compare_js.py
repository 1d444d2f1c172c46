"""The compare page's browser side: the address follows the view, and a zoom in any panel
goes on to the server as a move of the one shared x axis."""

from __future__ import annotations

__all__ = ["URL_SYNC_JS", "ZOOM_JS"]

URL_SYNC_JS = """
function(view) {
    if (!view) { return window.dash_clientside.no_update; }
    const params = new URLSearchParams();
    for (const run of view.runs) { params.append("run", run); }
    for (const metric of [view.metric, ...(view.more_metrics || [])]) {
        if (metric) { params.append("metric", metric); }
    }
    for (const key of ["start", "end"]) {
        const v = view[key];
        if (v !== null && v !== undefined && v !== "") { params.set(key, String(v)); }
    }
    if (view.log) { params.set("log", "1"); }
    if (view.smooth) { params.set("smooth", String(view.smooth)); }
    if (view.robust) { params.set("robust", "1"); }
    if (view.group) { params.set("group", view.group); }
    if (view.group_by) { params.set("group_by", view.group_by); }
    const target = window.location.pathname + "?" + params.toString();
    if (target !== window.location.pathname + window.location.search) {
        window.history.replaceState(window.history.state, "", target);
    }
    return window.dash_clientside.no_update;
}
"""
"""The browser side of :meth:`.compare_view.CompareView.from_query`: the page's address
follows the view (without a reload), so that it is always a deep link to what is shown."""

ZOOM_JS = """
function(relayout) {
    if (!relayout) { return window.dash_clientside.no_update; }
    const moved = {};
    for (const [key, value] of Object.entries(relayout)) {
        const found = key.match(/^xaxis[0-9]*\\.(range(\\[[01]\\])?|autorange)$/);
        if (found) { moved["xaxis." + found[1]] = value; }
    }
    return Object.keys(moved).length ? moved : window.dash_clientside.no_update;
}
"""
"""The browser side of :func:`.run_view.view_from_relayout` for a chart of several panels:
their x axes match, and a zoom in the second panel says ``xaxis2.range[0]``; each is passed
on as ``xaxis.range[0]``. Only moves of the x axes go to the server, as on the run page
(`.run_view.ZOOM_JS`): resizes and y-only changes would be round trips for nothing."""
