"""Levanter's tracker for normwatch: ``tracker: {type: normwatch}`` in a Levanter config.

Levanter (and Marin, built on it) logs through a ``Tracker`` that its config names::

    trainer:
      tracker:
        - type: wandb
          project: marin
        - type: normwatch
          url: https://normwatch.example
          project: marin
          tags: [32b]

The launch script imports this module before Levanter parses the config, which registers
the ``normwatch`` choice with Levanter's ``TrackerConfig`` (Levanter discovers only the
trackers of its own package)::

    import normwatch.client.levanter  # noqa: F401

Every ``levanter.tracker.log`` then reaches a `normwatch.client.Run`, which never blocks
and never raises: ``grad/norm/*``, ``params/norm/*``, ``updates/norm/*``, ``train/loss``
and the rest arrive under the names Levanter gives them. Without Levanter installed the
module still imports: `NormwatchConfig` and `NormwatchTracker` are plain classes with
Levanter's methods, and `register` binds them to any registry of the same shape.

**Steps and commit** follow W&B, as Levanter does: ``commit=False`` adds to a step
without finishing it; ``step=None`` means the step being logged (the first explicit step
when there is none yet, the next one after ``commit=True``). A step goes to the `Run` when
a call with an explicit step and ``commit`` None or True arrives, when a later step
starts, or at `NormwatchTracker.finish`: no later than W&B would show it.

**Values.** Real scalars pass unchanged, device arrays still on the device (the `Run`
reads them on its own thread). Nested dicts are flattened with ``/``. Levanter's
``Histogram`` and ``SummaryStats`` become the scalar statistics they carry, named as W&B's
Levanter backend names them (``<name>/min``, ``/max``, ``/mean``, ``/variance``, ...);
their buckets and every other value that is not a real scalar are dropped, with one
warning per name on the ``normwatch.client`` logger.

**The run** starts at the first step handed over, with the hyperparameters logged before
it (``levanter.initialize`` logs the whole config right after ``init``) as its config, the
summary values logged before it under ``"summary"``, and that step as its ``start_step``
(a job resumed from a checkpoint below the run's last step opens a new segment). Later
hyperparameters become a ``config`` event, later summary values the metric
``summary/<name>`` at the current step; artifacts and HTML are not stored. `finish` marks
the run ``finished``, or ``failed`` inside an exception handler. docs/client.md has the
details ("Levanter").

**How this is tested.** Levanter does not install as a small, clean test dependency (it
pulls W&B, transformers, datasets and tensorstore, pins an older Optax, and ``import
levanter.tracker`` imports the whole package), so the tests check conformance to a
transcription of Levanter's tracker interface (the abstract ``Tracker`` methods and their
signatures; ``TrackerConfig``, a draccus ``PluginRegistry``), with the real draccus
decoding the YAML.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import operator
import os
import sys
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import httpx

from ._batch import jsonable
from ._flatten import flatten_scalars
from ._hparams import MAX_EVENT_TEXT, clip, fit_config, redact
from ._reporting import WarnOnce, logger
from ._run import Run
from ._tracker import process_index, server_and_token
from ._writer import FINAL_STATUSES, FinalStatus

TRACKER_NAME = "normwatch"
"""The ``type:`` of the tracker in a Levanter config, and the tracker's ``name``."""

SUMMARY_PREFIX = "summary/"

RunFactory = Callable[[dict[str, object], int | None], Run]
"""Makes the run from its config and ``start_step`` (None: not known)."""


class NormwatchTracker:
    """A Levanter tracker that streams to a normwatch `Run`.

    ``make_run`` is called once, at the first step handed over (see the module's
    docstring); None makes a tracker that drops everything, for the processes that do not
    report. ``secret`` (the token) is replaced by ``<redacted>`` in the hyperparameters it
    sends. No method raises: what fails is logged on the ``normwatch.client`` logger.
    """

    name: str = TRACKER_NAME
    """Levanter's ``get_tracker("normwatch")`` finds the tracker by it."""

    def __init__(
        self,
        make_run: RunFactory | None,
        *,
        finish_timeout: float = 30.0,
        secret: str | None = None,
    ) -> None:
        self._make_run = make_run
        self._secret = secret
        self._run: Run | None = None
        self._finish_timeout = finish_timeout
        # Levanter logs from the training loop and from callbacks of other threads
        # (preprocessing metrics): one lock keeps a step's values together.
        self._lock = threading.Lock()
        self._config: dict[str, object] = {}
        self._summary: dict[str, object] = {}
        self._pending: dict[str, object] = {}
        self._step: int | None = None
        self._finished = False
        self._warn_once = WarnOnce()

    @property
    def run(self) -> Run | None:
        """The `Run` once it is started (the first step handed over), else None."""
        return self._run

    def log(
        self, metrics: Mapping[str, Any], *, step: int | None, commit: bool | None = None
    ) -> None:
        """Add ``metrics`` to ``step`` (None: the current step). The step is handed over
        now when ``commit`` is True, or None with an explicit ``step``; ``commit=False``
        keeps adding to it."""
        try:
            values = flatten_scalars(metrics, self._warn_once)
            with self._lock:
                if self._finished:
                    self._warn_once("finished", "Levanter tracker: log() after finish(); dropped")
                    return
                if step is not None:
                    at = _as_step(step)
                    # Values logged with step=None before any step join the first one.
                    if self._pending and self._step is not None and at != self._step:
                        self._flush()
                    self._step = at
                self._pending.update(values)
                if commit or (commit is None and step is not None):
                    self._flush()
                if commit:
                    self._step = (self._step or 0) + 1
        except Exception as exc:
            self._warn_once(
                f"log:{type(exc).__name__}", "Levanter tracker: dropped a log(): %s", exc
            )

    def log_hyperparameters(self, hparams: Mapping[str, Any]) -> None:
        """The run's config if it has not started yet, else a ``config`` event."""
        try:
            with self._lock:
                if self._run is None:
                    self._config.update(hparams)
                    return
                document = redact(jsonable(dict(hparams)), self._secret)
                text = "hyperparameters: " + json.dumps(document, separators=(",", ":"))
                self._run.event(clip(text, MAX_EVENT_TEXT), step=self._step or 0, kind="config")
        except Exception as exc:
            self._warn_once(
                f"hparams:{type(exc).__name__}",
                "Levanter tracker: dropped hyperparameters: %s",
                exc,
            )

    def log_summary(self, metrics: Mapping[str, Any]) -> None:
        """The config's ``"summary"`` if the run has not started yet, else metrics
        ``summary/<name>`` at the current step."""
        try:
            with self._lock:
                if self._run is None:
                    self._summary.update(metrics)
                    return
                values = flatten_scalars(metrics, self._warn_once)
                self._pending.update({SUMMARY_PREFIX + k: v for k, v in values.items()})
        except Exception as exc:
            self._warn_once(
                f"summary:{type(exc).__name__}", "Levanter tracker: dropped a summary: %s", exc
            )

    def log_artifact(
        self, artifact_path: Any, *, name: str | None = None, type: str | None = None
    ) -> None:
        logger.debug("Levanter tracker: normwatch stores no artifacts; skipped %s", artifact_path)

    def log_html(
        self, key: str, html_path: Any, *, step: int | None, commit: bool | None = None
    ) -> None:
        logger.debug("Levanter tracker: normwatch stores no HTML; skipped %s", key)

    def finish(self, status: FinalStatus | None = None) -> None:
        """Hand over the last step, then finish the run: ``status``, by default ``failed``
        while an exception is being handled and ``finished`` otherwise."""
        if status is None:
            status = "failed" if sys.exc_info()[0] is not None else "finished"
        if status not in FINAL_STATUSES:
            logger.warning(
                "Levanter tracker: finish(status=%r) is not a status; used failed", status
            )
            status = "failed"
        try:
            with self._lock:
                if self._finished:
                    return
                self._finished = True
                self._flush()
                run = self._start_run()
            if run is not None:
                run.finish(self._finish_timeout, status)
        except Exception:
            logger.exception("Levanter tracker: finish() failed")

    # Levanter's BackgroundTracker converts a payload on the training thread before it
    # queues it, by default with jax.device_get, a wait for the step; the Run reads device
    # values on its own thread instead, so they are left as they are.
    def _prepare_log(self, metrics: Mapping[str, Any]) -> Mapping[str, Any]:
        return metrics

    def _prepare_summary(self, metrics: Mapping[str, Any]) -> Mapping[str, Any]:
        return metrics

    def _prepare_hyperparameters(self, hparams: Mapping[str, Any]) -> Mapping[str, Any]:
        return hparams

    def _flush(self) -> None:
        """Hand the pending values to the run at the current step (lock held)."""
        if not self._pending:
            return
        run = self._start_run()
        if run is not None:
            run.log(self._pending, step=self._step or 0)
        self._pending = {}

    def _start_run(self) -> Run | None:
        """The run, started on the first call (lock held); None if it cannot be."""
        if self._run is not None or self._make_run is None:
            return self._run
        make_run, self._make_run = self._make_run, None
        config: dict[str, object] = dict(self._config)
        if self._summary:
            config["summary"] = dict(self._summary)
        try:
            self._run = make_run(config, self._step)
        except Exception:
            logger.exception("Levanter tracker: could not start the normwatch run; sends nothing")
        return self._run


@dataclass
class NormwatchConfig:
    """The ``normwatch`` tracker of a Levanter config; `init` makes the tracker.

    ``url`` and ``token`` default to ``$NORMWATCH_URL`` and ``$NORMWATCH_TOKEN``: keep the
    token out of the YAML, since Levanter logs its whole config, to every tracker, as
    hyperparameters. ``name`` defaults to Levanter's run id, so that a job resumed with the
    same id resumes the run. ``mode`` is ``online`` or ``disabled`` (default
    ``$NORMWATCH_MODE``, else ``online``). The other fields go to `Run`.
    """

    url: str | None = None
    token: str | None = field(default=None, repr=False)
    project: str | None = None
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    spool_dir: str | None = None
    flush_interval: float = 0.5
    timeout: float = 10.0
    finish_timeout: float = 30.0
    all_processes: bool = False
    mode: str | None = None

    tracker_class: ClassVar[type[NormwatchTracker]] = NormwatchTracker

    def init(
        self, run_id: str | None, *, transport: httpx.BaseTransport | None = None
    ) -> NormwatchTracker:
        """The tracker of run ``run_id``; ``transport`` goes to `httpx.Client` (tests pass
        `httpx.MockTransport`). Raises `ValueError` for a config that cannot work, so that
        the job stops before it trains, not after."""
        if self.mode not in (None, "online", "disabled"):
            raise ValueError(
                f"tracker normwatch: mode must be online or disabled, got {self.mode!r}"
            )
        mode = self.mode or os.environ.get("NORMWATCH_MODE", "").lower()
        if mode == "disabled" or (not self.all_processes and process_index() != 0):
            return self.tracker_class(None)
        url, token = server_and_token(
            self.url,
            self.token,
            needed_by="tracker normwatch",
            how="set url: (and token:, better left to the environment) in the tracker config",
        )
        name = self.name or run_id
        if not name:
            raise ValueError(
                "tracker normwatch needs a run name: set name: in the tracker config, or give "
                "the trainer an id (trainer.id)"
            )
        for option in ("flush_interval", "timeout"):
            if not getattr(self, option) > 0:
                raise ValueError(f"tracker normwatch: {option} must be > 0 seconds")
        tags = [str(tag) for tag in self.tags]

        def make_run(config: dict[str, object], start_step: int | None) -> Run:
            return Run(
                url,
                token=token,
                project=self.project,
                name=name,
                config=fit_config(redact(jsonable(config), token)),
                tags=tags,
                start_step=start_step,
                flush_interval=self.flush_interval,
                timeout=self.timeout,
                spool_dir=self.spool_dir,
                transport=transport,
            )

        return self.tracker_class(make_run, finish_timeout=self.finish_timeout, secret=token)


_registered: dict[type[Any], type[NormwatchConfig]] = {}
_register_lock = threading.Lock()


def register(
    tracker_config: type[Any] | None = None, tracker: type[Any] | None = None
) -> type[NormwatchConfig]:
    """Register ``normwatch`` as a choice of Levanter's ``TrackerConfig`` and return the
    config class registered.

    ``tracker_config`` and ``tracker`` default to ``levanter.tracker.TrackerConfig`` and
    ``levanter.tracker.Tracker``; the classes made subclass them and `NormwatchConfig` /
    `NormwatchTracker`. Importing this module does it when Levanter is installed; calling it
    again returns the same class.
    """
    with _register_lock:
        if tracker_config is None or tracker is None:
            levanter_tracker = importlib.import_module("levanter.tracker")
            tracker_config = tracker_config or levanter_tracker.TrackerConfig
            tracker = tracker or levanter_tracker.Tracker
        assert tracker_config is not None and tracker is not None
        if tracker_config in _registered:
            return _registered[tracker_config]
        module = {"__module__": __name__}
        tracker_class = types.new_class(
            "LevanterNormwatchTracker",
            (NormwatchTracker, tracker),
            exec_body=lambda ns: ns.update(module),
        )
        config_class = types.new_class(
            "LevanterNormwatchConfig",
            (NormwatchConfig, tracker_config),
            exec_body=lambda ns: ns.update(module, tracker_class=tracker_class),
        )
        registered = cast(type[NormwatchConfig], dataclass(config_class))
        tracker_config.register_subclass(TRACKER_NAME)(registered)
        _registered[tracker_config] = registered
        return registered


def _as_step(step: object) -> int:
    value = step if type(step) is int else operator.index(step)  # type: ignore[arg-type]
    if value < 0:
        raise ValueError(f"step must be >= 0, got {value}")
    return value


def _register_if_installed() -> None:
    # Without Levanter the plain classes are all there is; with it, an import error of
    # Levanter's own is a broken environment and is raised, not hidden.
    if "levanter" in sys.modules or importlib.util.find_spec("levanter") is not None:
        register()


_register_if_installed()

__all__ = ["NormwatchConfig", "NormwatchTracker", "register"]
