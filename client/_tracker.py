"""Trackers: the small interface a trainer logs through, and the module-level API.

``Tracker`` is what a trainer with its own tracker abstraction (Levanter, OLMo-core) wraps:
`Run` (HTTP to a normwatch server), `NoopTracker`, `MemoryTracker` (tests, notebooks) and
`CompositeTracker` (several at once, e.g. normwatch and W&B) all satisfy it. The
module-level `init` / `log` / `event` / `finish` mirror ``wandb``'s for scripts that want
one global run.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ._run import Run
from ._writer import FinalStatus

logger = logging.getLogger("normwatch.client")


@runtime_checkable
class Tracker(Protocol):
    """Where a trainer's metrics go. Implementations never raise from `log` or `event`."""

    def log(self, metrics: Mapping[str, object], *, step: int) -> None: ...

    def event(self, text: str, *, step: int, kind: str = "note") -> None: ...

    def finish(self, timeout: float = 30.0, status: FinalStatus = "finished") -> None: ...


class NoopTracker:
    """Accepts everything, keeps nothing: for processes that should not report."""

    def log(self, metrics: Mapping[str, object], *, step: int) -> None:
        pass

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        pass

    def finish(self, timeout: float = 30.0, status: FinalStatus = "finished") -> None:
        pass


@dataclass
class MemoryTracker:
    """Keeps what is logged, as floats, in memory.

    >>> t = MemoryTracker()
    >>> t.log({"loss": 2.5}, step=3)
    >>> t.history
    [(3, {'loss': 2.5})]
    """

    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    events: list[tuple[int, str, str]] = field(default_factory=list)
    status: FinalStatus | None = None

    def log(self, metrics: Mapping[str, object], *, step: int) -> None:
        row: dict[str, float] = {}
        for name, value in metrics.items():
            try:
                row[name] = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                logger.warning("MemoryTracker: dropped %s=%r (not a real scalar)", name, value)
        self.history.append((int(step), row))

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        self.events.append((int(step), kind, text))

    def finish(self, timeout: float = 30.0, status: FinalStatus = "finished") -> None:
        self.status = status

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """Steps and values of one metric, in logging order."""
        pairs = [(s, m[name]) for s, m in self.history if name in m]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def last(self, name: str) -> float:
        """The last value logged for ``name`` (NaN if never)."""
        for _, metrics in reversed(self.history):
            if name in metrics:
                return metrics[name]
        return math.nan


class CompositeTracker:
    """Forwards to several trackers; one that fails is logged and does not stop the others."""

    def __init__(self, *trackers: Tracker) -> None:
        self.trackers = trackers

    def log(self, metrics: Mapping[str, object], *, step: int) -> None:
        for tracker in self.trackers:
            try:
                tracker.log(metrics, step=step)
            except Exception:
                logger.exception("tracker %r failed in log(); continuing", tracker)

    def event(self, text: str, *, step: int, kind: str = "note") -> None:
        for tracker in self.trackers:
            try:
                tracker.event(text, step=step, kind=kind)
            except Exception:
                logger.exception("tracker %r failed in event(); continuing", tracker)

    def finish(self, timeout: float = 30.0, status: FinalStatus = "finished") -> None:
        for tracker in self.trackers:
            try:
                tracker.finish(timeout, status)
            except Exception:
                logger.exception("tracker %r failed in finish(); continuing", tracker)


def process_index() -> int:
    """This process's index in a multi-host job: JAX's if JAX is in use, else ``$RANK``, else 0.

    JAX is consulted only when the trainer already imported it, so the client never pulls
    JAX in (or initialises a backend) by itself.
    """
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            return int(jax.process_index())
        except Exception:  # a backend that cannot answer counts as a single process
            return 0
    rank = os.environ.get("RANK", "0")
    return int(rank) if rank.isdigit() else 0


_current: Tracker = NoopTracker()


def reporting_disabled() -> bool:
    """``NORMWATCH_MODE=disabled``: this process reports nothing."""
    return os.environ.get("NORMWATCH_MODE", "").lower() == "disabled"


def server_and_token(
    url: str | None,
    token: str | None,
    *,
    needed_by: str,
    how: str = "pass url= and token=",
) -> tuple[str, str]:
    """``url`` and ``token``, each defaulting to ``$NORMWATCH_URL`` / ``$NORMWATCH_TOKEN``;
    a `ValueError` naming ``needed_by`` and the fix (``how``) when either is missing."""
    url = url or os.environ.get("NORMWATCH_URL")
    token = token or os.environ.get("NORMWATCH_TOKEN")
    if not url or not token:
        raise ValueError(
            f"{needed_by} needs a normwatch server URL and an ingest token: {how}, or set "
            "NORMWATCH_URL and NORMWATCH_TOKEN (or NORMWATCH_MODE=disabled)"
        )
    return url, token


def init(
    name: str,
    *,
    url: str | None = None,
    token: str | None = None,
    project: str | None = None,
    all_processes: bool = False,
    **run_options: Any,
) -> Tracker:
    """Start the global run that `log`, `event` and `finish` write to, and return it.

    ``url`` and ``token`` default to ``$NORMWATCH_URL`` and ``$NORMWATCH_TOKEN``. In a
    multi-host job only process 0 reports (the others get a `NoopTracker`) unless
    ``all_processes``. ``NORMWATCH_MODE=disabled`` turns reporting off everywhere.
    Other keyword arguments go to `Run`.
    """
    global _current
    _current.finish()
    if reporting_disabled():
        _current = NoopTracker()
        return _current
    if not all_processes and process_index() != 0:
        _current = NoopTracker()
        return _current
    url, token = server_and_token(url, token, needed_by="normwatch.client.init")
    _current = Run(url, token=token, project=project, name=name, **run_options)
    return _current


def log(metrics: Mapping[str, object], *, step: int) -> None:
    """Log to the run started by `init` (nothing before `init`)."""
    _current.log(metrics, step=step)


def event(text: str, *, step: int, kind: str = "note") -> None:
    """Post an event to the run started by `init`."""
    _current.event(text, step=step, kind=kind)


def should_stop() -> bool:
    """Whether the run started by `init` was asked to stop (`Run.should_stop`); False for
    a process that does not report, or before `init`."""
    current = _current
    return isinstance(current, Run) and current.should_stop()


def should_checkpoint() -> bool:
    """Whether the run started by `init` was asked for a checkpoint since the last time
    this said True (`Run.should_checkpoint`); False for a process that does not report."""
    current = _current
    return isinstance(current, Run) and current.should_checkpoint()


def finish(timeout: float = 30.0, status: FinalStatus = "finished") -> None:
    """Flush and close the run started by `init`."""
    global _current
    _current.finish(timeout, status)
    _current = NoopTracker()
