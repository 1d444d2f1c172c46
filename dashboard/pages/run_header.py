"""The run page's header: the run's status, its segment and restarts, its note, its config.
Pure.

The page builds it once from the run it read (`header_parts`); then its tick
(`.run_tick.tick`) reads the run again only when the run may have changed (`header_due`) and
sends the parts back only when what they show changed (`header_key`): a run resumed while
its page is open says "running" and its new segment, one finished says so, a note edited
elsewhere shows, and config keys the trainer posted since appear, without a reload.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from dash import html

from normwatch.server.schemas import RunOut

from .run_config import config_parts

__all__ = [
    "HEADER_EVERY",
    "header_due",
    "header_key",
    "header_parts",
    "note_of",
    "restarts_text",
    "state_of",
]

HEADER_EVERY = 5
"""Without the live channel, the run is read for its header every this many beats: a run
finished or resumed logs no point that would say so."""


def restarts_text(run: RunOut) -> str:
    """'segment 3 · restarted at 1,200, 5,000' (the steps each later segment began at)."""
    restarts = [s.start_step for s in run.segments or [] if s.segment > 1]
    steps = ", ".join(f"{step:,}" for step in restarts if step is not None)
    return f"segment {run.segment}" + (f" · restarted at {steps}" if restarts else "")


def state_of(run: RunOut) -> list[Any]:
    """The header's status badge and its segment text."""
    return [
        html.Span(run.status, className=f"status status-{run.status}", id="run-status"),
        html.Span(restarts_text(run), className="muted", id="run-restarts"),
    ]


def note_of(run: RunOut) -> list[Any]:
    """The header's note: the run's note as plain text, nothing for a run without one."""
    return [html.P(run.notes, className="run-note-text")] if run.notes else []


def header_parts(run: RunOut) -> tuple[list[Any], list[Any], list[Any]]:
    """The header's live parts for ``run``: the status and segment (`state_of`), what the
    config section holds (`.run_config.config_parts`), and the note (`note_of`)."""
    return state_of(run), config_parts(run.config), note_of(run)


def header_key(run: RunOut) -> int:
    """A number that changes when what the header shows of ``run`` does: its status, its
    segment and the steps its segments began at, its note, its config. CRC-32, the same on every
    worker (it travels in the page's store)."""
    shown = {
        "status": run.status,
        "segment": run.segment,
        "starts": [(s.segment, s.start_step) for s in run.segments or []],
        "config": run.config,
        "notes": run.notes,
    }
    return zlib.crc32(json.dumps(shown, sort_keys=True, default=str).encode())


def header_due(*, told: bool, version_seen: bool, channel_open: bool, beats: range) -> bool:
    """Whether a tick reads the run for its header: when the live channel said the run
    changed (or the tab shows again: ``told``), when the run logged something the header has
    not seen (``version_seen`` False: a resumed run's first points), and, without the
    channel, every `HEADER_EVERY` beats. With the channel open and nothing new, never: the
    server says when the run's status or segment moved.

    >>> header_due(told=False, version_seen=True, channel_open=True, beats=range(1, 11))
    False
    >>> header_due(told=False, version_seen=True, channel_open=False, beats=range(4, 6))
    True
    >>> header_due(told=False, version_seen=False, channel_open=True, beats=range(0))
    True
    """
    if told or not version_seen:
        return True
    return not channel_open and any(b % HEADER_EVERY == 0 for b in beats)
