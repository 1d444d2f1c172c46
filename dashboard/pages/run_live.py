"""How an open run page learns that its run changed: told by the server, else by looking.

The page's one tick callback (`.run_tick.tick`) reads the run's metrics and sets off the chart's
redraw when they changed. Two things call it:

- **the server's word**: the page's script (`LIVE_JS`) holds a WebSocket to the run's live
  channel (:mod:`normwatch.dashboard.live`), and on each "changed" it pokes the
  ``live-poke`` store, which the tick callback listens to: the chart is redrawn as soon as
  the trainer's batch is stored. The script pokes only once the page has drawn what the last
  poke set off: Dash keeps only the newest call of a callback, so calls sent faster than
  they are answered would drop one another and never draw at all.
- **its own ``dcc.Interval``**, whose interval the callback sets (`interval_for`): with the
  channel open, `PUSHED_MS` (it only paces the sections); without it (refused, a proxy that
  does not pass WebSockets, the server restarting), `TICK_MS`, and the page finds what the
  run logged by looking once a second, as it did before it had a channel. A shorter
  interval while the run logs was measured and dropped: with eight charts on screen, ticks
  four times a second dropped one another and kept the browser too busy to draw
  (docs/benchmarks.md, "Live: step to chart").

A tab that is hidden rests: the script pokes when it hides, and the callback then reads
nothing (and ticks every `PUSHED_MS`) until the script pokes again as it shows, when the
chart is redrawn and every section reads what it missed.

The sections and the chart's unconditional redraws keep a pace in seconds whatever the
interval: the callback counts the page's life in "beats" (whole `TICK_MS` periods, summed
over the intervals it set) and hands each section the beats that passed since its last
call. What it has to remember between calls (`Pace`) travels in the page's ``ticks-seen``
store, which comes back from the browser, so `Pace.from_store` takes only what it could
have written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import dash
from dash import Input, Output, dcc, html

__all__ = [
    "LIVE_JS",
    "MAX_BEATS",
    "PUSHED_MS",
    "TICK_MS",
    "Pace",
    "Poke",
    "Turn",
    "channel",
    "interval_for",
    "register",
]

TICK_MS = 1000
"""The interval without a channel, and the length of a beat."""
PUSHED_MS = 5000
"""The interval while the channel is open (the server says when to look) or the tab hidden."""
MAX_BEATS = 60
"""The most beats one call hands on: a page the browser froze for an hour catches up once."""
INTERVALS = (TICK_MS, PUSHED_MS)


@dataclass(frozen=True)
class Poke:
    """What the page's script put in the ``live-poke`` store: its ``n``-th poke, whether
    the channel is ``open``, whether the run ``changed`` (else only the channel or the tab
    did: the tab shows again counts as a change), and whether the tab is ``hidden``."""

    n: int = 0
    open: bool = False
    changed: bool = False
    hidden: bool = False

    @classmethod
    def from_store(cls, value: object) -> Poke:
        if not isinstance(value, Mapping):
            return cls()
        n, flags = _int(value.get("n")), [value.get(k) for k in ("on", "changed", "hidden")]
        if n is None or not all(isinstance(flag, bool) for flag in flags):
            return cls()
        return cls(n, *(bool(flag) for flag in flags))


@dataclass(frozen=True)
class Turn:
    """What one call of the tick callback brings: the ``pace`` after it; the ``beats`` that
    passed since the last call (none when the interval did not fire: a poke, or a count gone
    back); whether it takes a poke that asks for a ``redraw`` (the run changed, or the tab
    shows again); and whether the tab was ``shown`` again after it was hidden."""

    pace: Pace
    beats: range
    redraw: bool = False
    shown: bool = False


@dataclass(frozen=True)
class Pace:
    """What the tick callback keeps between calls.

    ``n`` is the interval's count at the last call and ``ms`` the page's life then, in ms
    of interval ticks (``every`` ms each since the interval was last set); ``pokes`` the
    last poke taken and whether it said the tab was ``hidden``; ``seq`` counts the calls,
    so that each store a call sets gets a new value.

    >>> turn = Pace().advance(3)
    >>> list(turn.beats), turn.pace.ms, interval_for(Poke())
    ([1, 2, 3], 3000, 1000)
    >>> turn = turn.pace.advance(3, poke=Poke(1, open=True))  # the channel opened
    >>> list(turn.beats), turn.redraw, interval_for(Poke(1, open=True))
    ([], False, 5000)
    >>> turn = replace(turn.pace, every=PUSHED_MS).advance(4)  # five seconds on
    >>> list(turn.beats), turn.pace.ms
    ([4, 5, 6, 7, 8], 8000)
    >>> turn = turn.pace.advance(4, poke=Poke(2, open=True, changed=True))  # the run changed
    >>> list(turn.beats), turn.redraw, turn.shown
    ([], True, False)
    >>> turn = turn.pace.advance(4, poke=Poke(3, open=True, hidden=True))
    >>> turn = turn.pace.advance(4, poke=Poke(4, open=True, changed=True))  # shown again
    >>> turn.redraw, turn.shown
    (True, True)
    """

    n: int = 0
    ms: int = 0
    every: int = TICK_MS
    pokes: int = 0
    hidden: bool = False
    seq: int = 0

    @classmethod
    def from_store(cls, value: object) -> Pace:
        """The pace `to_store` wrote; the first pace for anything else."""
        if not isinstance(value, Mapping):
            return cls()
        n, ms, every, pokes, seq = (
            _int(value.get(key)) for key in ("n", "ms", "every", "pokes", "seq")
        )
        hidden = value.get("hidden")
        if n is None or ms is None or every is None or pokes is None or seq is None:
            return cls()
        if every not in INTERVALS or not isinstance(hidden, bool):
            return cls()
        return cls(n, ms, every, pokes, hidden, seq)

    def to_store(self) -> dict[str, int | bool]:
        return {
            "n": self.n,
            "ms": self.ms,
            "every": self.every,
            "pokes": self.pokes,
            "hidden": self.hidden,
            "seq": self.seq,
        }

    def advance(self, n_intervals: object, *, poke: Poke | None = None) -> Turn:
        """The `Turn` of a call at the interval's count ``n_intervals``, with the page's
        ``poke`` store (a poke is taken once)."""
        count = _int(n_intervals)
        n = self.n if count is None else count
        ms = self.ms + max(0, n - self.n) * self.every
        first, last = self.ms // TICK_MS + 1, ms // TICK_MS
        beats = range(max(first, last - MAX_BEATS + 1), last + 1)
        after = replace(self, n=max(n, self.n), ms=ms, seq=self.seq + 1)
        if poke is None or poke.n <= self.pokes:
            return Turn(after, beats)
        after = replace(after, pokes=poke.n, hidden=poke.hidden)
        return Turn(after, beats, poke.changed, self.hidden and not poke.hidden)


def interval_for(poke: Poke) -> int:
    """`PUSHED_MS` while the channel is open or the tab hidden, else `TICK_MS`."""
    return PUSHED_MS if poke.open or poke.hidden else TICK_MS


LIVE_JS = """
function(path) {
    const dc = window.dash_clientside;
    const live = window.normwatchLive = window.normwatchLive || {pokes: 0};
    const drop = () => {
        if (live.socket) { live.socket.onclose = null; live.socket.close(); live.socket = null; }
        clearTimeout(live.retry);
        clearTimeout(live.wait);
        clearInterval(live.check);
    };
    drop();
    live.path = path || null;
    live.open = false;
    if (!path) { return dc.no_update; }
    const here = () => live.path === path && document.getElementById("live-sink") !== null;
    // The page left for another of the dashboard's: its channel goes too.
    live.check = setInterval(() => { if (!here()) { drop(); } }, 5000);
    const busy = () => document.querySelector(
        '#overlay[data-dash-is-loading="true"], #run-last-step[data-dash-is-loading="true"]'
    ) !== null;
    const poke = (changed) => {
        live.pokes += 1;
        live.sent = Date.now();
        dc.set_props("live-poke", {data: {
            n: live.pokes, on: live.open, changed: changed, hidden: document.hidden}});
    };
    // A change is told once the page has drawn the last one (or after 5 s of waiting).
    const tell = () => {
        clearTimeout(live.wait);
        if (!live.pending || !here() || document.hidden) { return; }
        if (busy() && Date.now() - live.sent < 5000) { live.wait = setTimeout(tell, 50); return; }
        live.pending = false;
        poke(true);
    };
    // Hidden, the page rests; shown again, it draws and reads what it missed.
    live.shown = () => {
        if (!here()) { return; }
        clearTimeout(live.wait);
        live.pending = false;
        poke(!document.hidden);
    };
    if (!live.listening) {
        document.addEventListener("visibilitychange", () => live.shown());
        live.listening = true;
    }
    let failures = 0;
    const open = () => {
        if (!here()) { return; }
        const scheme = location.protocol === "https:" ? "wss://" : "ws://";
        const socket = new WebSocket(scheme + location.host + path);
        live.socket = socket;
        socket.onopen = () => {
            live.open = true;
            // Back after a break: what came meanwhile is drawn now.
            if (failures) { live.pending = true; tell(); } else { poke(false); }
            failures = 0;
        };
        socket.onmessage = () => {
            if (!here()) { socket.close(); return; }
            live.pending = true;
            tell();
        };
        socket.onclose = (event) => {
            if (live.socket !== socket) { return; }
            live.socket = null;
            live.open = false;
            if (!here()) { return; }
            if (event.code === 1000 && event.reason === "renew") { open(); return; }
            poke(false);
            failures += 1;
            const backoff = Math.min(30000, 1000 * 2 ** Math.min(failures - 1, 5));
            live.retry = setTimeout(open, backoff * (0.7 + 0.6 * Math.random()));
        };
    };
    open();
    return dc.no_update;
}
"""
"""The browser side of the live channel, run once each time a run page is built: opens
the WebSocket of ``path`` and pokes the ``live-poke`` store (`Poke`) when it opens, when
the server says the run changed (once the page is not busy with the last change, and not
while the tab is hidden), when the tab hides or shows, and when the channel closes; then it
opens it again, after 1, 2, 4 ... up to 30 s (jittered), or at once when the server renewed
it. A channel whose page is gone closes."""


def channel(run_id: str) -> list[Any]:
    """The page's parts of the live channel: where it is, the store its script pokes."""
    return [
        dcc.Store(id="live-path", data=f"/runs/{run_id}/live"),
        dcc.Store(id="live-poke"),
        html.Div(id="live-sink", hidden=True),
    ]


def register(app: dash.Dash) -> None:
    app.clientside_callback(LIVE_JS, Output("live-sink", "children"), Input("live-path", "data"))


def _int(value: object) -> int | None:
    """``value`` if it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
