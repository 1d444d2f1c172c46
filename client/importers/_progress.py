"""A one-line progress bar on stderr: steps done of the total, rate, time left.

On a terminal the line is redrawn in place (at most ten times a second); elsewhere (a CI
log, a file) a plain line is written every ``line_interval`` seconds instead, so logs do
not fill with carriage returns. Notes are printed on lines of their own above the bar.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

_BAR_WIDTH = 20


def format_duration(seconds: float) -> str:
    """``75`` → ``"1:15"``, ``3700`` → ``"1:01:40"``."""
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """Progress of one import, e.g. ``gpt2 [#####---------------] 26% 5,120/19,561 steps
    2,048 steps/s ETA 0:07``.

    ``live`` forces in-place redrawing on or off (default: whether ``stream`` is a
    terminal); a live line is cut to ``columns`` characters (default: the terminal's
    width). ``clock`` is injectable so tests control time.
    """

    def __init__(
        self,
        label: str,
        *,
        unit: str = "steps",
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        redraw_interval: float = 0.1,
        line_interval: float = 10.0,
        columns: int | None = None,
    ) -> None:
        self.label = label
        self.unit = unit
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty() if live is None else live
        self._clock = clock
        self._redraw_interval = redraw_interval
        self._line_interval = line_interval
        self._columns = columns
        self._started = clock()
        self._drawn_at = -float("inf")
        self._drawn_width = 0
        self._done = 0
        self._total: int | None = None
        self._status = ""
        self._closed = False
        # The client's sender thread may print a warning while the importing thread draws.
        self._lock = threading.Lock()

    def update(self, done: int, *, total: int | None = None, status: str = "") -> None:
        """Record ``done`` of ``total``; redraws only when enough time has passed."""
        if self._closed:
            return
        self._done, self._total, self._status = done, total, status
        now = self._clock()
        interval = self._redraw_interval if self._live else self._line_interval
        if now - self._drawn_at >= interval:
            with self._lock:
                self._draw(now)

    def note(self, message: str) -> None:
        """Print ``note: message`` on its own line, keeping the bar below it."""
        self.print(f"note: {message}")

    def print(self, line: str) -> None:
        """Print ``line`` on its own line above the bar."""
        with self._lock:
            self._clear()
            self._stream.write(line + "\n")
            if self._live and not self._closed:
                self._draw(self._clock())
            self._stream.flush()

    def close(self) -> None:
        """Finish the line: a last draw with the final count and rate, then a newline."""
        with self._lock:
            if self._closed:
                return
            self._status = ""
            self._draw(self._clock(), final=True)
            self._closed = True

    def abandon(self) -> None:
        """End the bar's line without a final count (the import failed; an error follows)."""
        with self._lock:
            if not self._closed and self._live and self._drawn_width:
                self._stream.write("\n")
                self._stream.flush()
            self._closed = True

    def render(self, now: float, *, final: bool = False) -> str:
        """The text of the bar at time ``now``."""
        elapsed = max(now - self._started, 1e-9)
        rate = self._done / elapsed
        done, total, unit = self._done, self._total, self.unit
        if final:
            text = (
                f"{self.label}: {done:,} {unit} in {format_duration(elapsed)}  {rate:,.0f} {unit}/s"
            )
        elif total:
            fraction = min(done / total, 1.0)
            filled = int(fraction * _BAR_WIDTH)
            bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
            eta = format_duration((total - done) / rate) if rate > 0 and done < total else "-:--"
            text = (
                f"{self.label} [{bar}] {fraction:4.0%} {done:,}/{total:,} {unit}"
                f"  {rate:,.0f} {unit}/s  ETA {eta}"
            )
        else:
            text = f"{self.label}: {done:,} {unit}  {rate:,.0f} {unit}/s"
        return f"{text}  ({self._status})" if self._status else text

    def _draw(self, now: float, *, final: bool = False) -> None:
        self._drawn_at = now
        text = self.render(now, final=final)
        if not self._live:
            self._stream.write(text + "\n")
            self._stream.flush()
            return
        columns = self._columns or shutil.get_terminal_size((100, 24)).columns
        text = text[: max(columns - 1, 10)]
        padding = " " * max(self._drawn_width - len(text), 0)
        self._stream.write(f"\r{text}{padding}" + ("\n" if final else ""))
        self._stream.flush()
        self._drawn_width = 0 if final else len(text)

    def _clear(self) -> None:
        if self._live and self._drawn_width:
            self._stream.write("\r" + " " * self._drawn_width + "\r")
            self._drawn_width = 0
