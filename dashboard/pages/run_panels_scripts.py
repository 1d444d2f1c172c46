"""The browser side of the run page's panels: drawing as they come into view, and a
panel's zoom moving the view (`.run_panels`). Clientside callbacks: the dashboard's
security policy allows them by hash (`normwatch.dashboard.security`)."""

from __future__ import annotations

__all__ = ["OBSERVE_JS", "PANEL_ZOOM_JS", "PANELS_TICK_JS"]

OBSERVE_JS = """
function(_groups) {
    const dc = window.dash_clientside;
    const state = window.normwatchPanels = window.normwatchPanels || {};
    if (state.observer) { state.observer.disconnect(); }
    clearTimeout(state.timer);
    const near = new Set();
    const send = () => {
        state.timer = null;
        // Another page took this one's place (a link inside the app): its store is gone.
        if (!document.getElementById("panel-groups")) {
            state.observer.disconnect();
            return;
        }
        dc.set_props("panels-seen", {data: Array.from(near).sort()});
    };
    state.observer = new IntersectionObserver((entries) => {
        for (const entry of entries) {
            const key = entry.target.dataset.key;
            if (entry.isIntersecting) { near.add(key); } else { near.delete(key); }
        }
        if (!state.timer) { state.timer = setTimeout(send, 60); }
    }, {rootMargin: "200px 0px"});
    for (const panel of document.querySelectorAll("#panel-groups .panel[data-key]")) {
        state.observer.observe(panel);
    }
    if (!state.clicking) {
        state.clicking = true;
        state.clicks = 0;
        document.addEventListener("click", (event) => {
            const hit = event.target.closest("#panel-groups [data-act]");
            if (!hit) { return; }
            state.clicks += 1;
            dc.set_props("panel-click", {data: {
                row: {act: hit.dataset.act, key: hit.dataset.key}, clicks: state.clicks}});
        });
    }
    return dc.no_update;
}
"""
"""The browser side of lazy drawing: the keys of the panels within 200 px of the window
go into the ``panels-seen`` store as the page scrolls (or a group opens), at most every
60 ms; the server draws those not drawn yet for the view (`.run_panels_draw.draw_panels`).
A folded group's panels have no box, so they are never in view. Once another page of the
app has taken the run page's place, its panels leaving the document say nothing: the store
they would fill is gone. And the section's clicks:
one listener for every panel's buttons and every group's fold (their ``data-act`` and
``data-key``), which puts ``{"row": {"act", "key"}, "clicks": n}`` into ``panel-click``
(`..wiring.clicked_row` reads it)."""
PANEL_ZOOM_JS = """
function(_relayouts) {
    const dc = window.dash_clientside;
    const state = window.normwatchPanels = window.normwatchPanels || {};
    const sent = state.zooms = state.zooms || new WeakSet();
    for (const hit of dc.callback_context.triggered || []) {
        const relayout = hit.value;
        if (!relayout || typeof relayout !== "object" || sent.has(relayout)) { continue; }
        sent.add(relayout);
        const moved = Object.keys(relayout).some(
            key => key.startsWith("xaxis.range") || key === "xaxis.autorange");
        if (moved) { dc.set_props("overlay-zoom", {data: relayout}); }
    }
    return dc.no_update;
}
"""
"""A panel's zoom, pan or autoscale goes where the overlay's goes (``overlay-zoom``, the
view's input), so that the view's range follows it; a ``relayoutData`` already sent (a
panel that did not move, listed again as panels are drawn) is not sent twice."""
PANELS_TICK_JS = """
function(tick) {
    window.dash_clientside.set_props("panels-tick", {data: tick});
    return window.dash_clientside.no_update;
}
"""
"""The page's live tick (``draw-tick``), passed on to ``panels-tick``, which the panels'
draw listens to. Set with ``set_props``, not as an output: Dash holds a callback whose
input some pending callback's outputs lead to, and the tick's callback is pending about
every second, so on a page load the first panels waited seconds for it."""
