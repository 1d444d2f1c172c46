"""W&B side by side: every ``wandb.log`` of a run also goes to normwatch, at W&B's step.

>>> import wandb
>>> from normwatch.client.wandb_mirror import mirror_wandb
>>> wandb.init(project="marin", config={"lr": 3e-4})  # doctest: +SKIP
>>> mirror = mirror_wandb(name="32b-exp1295")  # doctest: +SKIP
>>> wandb.log({"train/loss": 2.31, "grad/norm/total": 0.42})  # doctest: +SKIP
>>> mirror.stop()  # doctest: +SKIP

Or ``mirror_wandb(run)`` with a `Run` (any `Tracker`) made beforehand. The trainer keeps
calling ``wandb.log`` / ``run.log`` as it did; nothing else changes.

**How it hooks in.** wandb has no public hook on logging. ``wandb.init`` binds the module's
``wandb.log`` to the run's own ``log`` method, so replacing ``run.log`` would miss every
``wandb.log`` call. Both, and wandb's integrations (``wandb.watch``, TensorBoard syncing),
go through the run's ``_log(data, step, commit)``; the mirror sets an instance attribute
of that name on this one run object that calls the class's method and then forwards, and
`WandbMirror.stop` removes it. No class is patched, no other run is touched, and a wandb
without ``_log`` is refused when the mirror is set up, not found out mid-training. The
same is done to ``_finish``, which ``run.finish()``, ``wandb.finish()``, the end of a
``with wandb.init()`` block and ``wandb.teardown()`` all call.

**Steps.** The step a value lands on is the one wandb records (`next_wandb_step`, the
rules of wandb-core's history handler): without ``step=`` a call logs at the current step
and, unless ``commit=False``, moves it on by one; ``step=`` above the current step moves
to it, and the current step accumulates until a commit or a higher step; a ``step=``
below the current step is dropped whole by wandb, and by the mirror. Values logged at one
step in several calls are merged by the mirror as wandb merges them (the later one wins),
and the step goes to the tracker once, when wandb commits it (a call that moves the step
on, a higher ``step=``, or the end of the mirror): a normwatch point keeps its first value,
so forwarding each call as it came would keep the earlier value where W&B keeps the later.
The mirror follows its own count from the run's step when it starts, because the SDK's
``run._local_step`` goes wrong after a dropped call with ``commit=True``. Custom x-axes
(``wandb.define_metric(..., step_metric=...)``) change only W&B's charts: normwatch keeps
W&B's ``_step``, and the axis metric arrives as a metric of its own, at the steps it was
logged (not the copies of it wandb adds to the rows of the metrics on that axis).

**Values.** Only real scalars are forwarded: Python ints and floats, NumPy and JAX values
of size 1 (wandb records those as numbers too), NaN and infinities included. Booleans
(wandb records ``true``), strings, lists, larger arrays and media (``wandb.Histogram``,
``Image``, ``Table``...) are skipped without a warning. A nested dict is flattened as W&B
spells its columns, ``{"val": {"loss": x}}`` as ``val.loss`` (``separator=``).

**Never in the way.** What the mirror itself fails at is logged once on the
``normwatch.client`` logger and swallowed; an error of wandb's own (a key that is not a
string) reaches the trainer exactly as without the mirror, and nothing is forwarded.
Forwarding is a `Run.log` call, which neither blocks nor raises.

**Config and finish.** A `Run` made by `mirror_wandb` starts with ``wandb.config`` as its
config (later ``wandb.config`` changes are not sent) and W&B's current step as its
``start_step``. When the wandb run finishes, the mirror stops and, with ``finish=True``
(the default), finishes the tracker too: ``failed`` for a non-zero exit code, else
``finished``. W&B's shared mode, where the W&B server numbers the steps, is refused.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._reporting import WarnOnce, logger
from ._run import Run
from ._tracker import NoopTracker, Tracker, reporting_disabled, server_and_token
from ._wandb_rules import next_wandb_step, scalar_metrics

if TYPE_CHECKING:
    from wandb import Run as WandbRun

__all__ = ["WandbMirror", "mirror_wandb", "next_wandb_step", "scalar_metrics"]


class WandbMirror:
    """Forwards a wandb run's logged scalars to a `Tracker` until `stop`; made by
    `mirror_wandb` (see the module)."""

    def __init__(
        self,
        tracker: Tracker,
        wandb_run: WandbRun,
        *,
        step: int,
        finish: bool = True,
        finish_timeout: float = 30.0,
        separator: str = ".",
    ) -> None:
        self.tracker = tracker
        self.wandb_run = wandb_run
        self._step = step
        self._finish_tracker = finish
        self._finish_timeout = finish_timeout
        self._separator = separator
        self._active = False
        # Reentrant: a wandb integration may log from inside a logging call. Held around
        # wandb's own call so that concurrent loggers land in the order wandb saw them.
        self._lock = threading.RLock()
        self._warn_once = WarnOnce()
        self._installed: dict[str, tuple[Callable[..., Any], object]] = {}
        self._row: dict[str, object] = {}
        """The values of the step wandb has not committed yet (``_row_step``)."""
        self._row_step = step

    @property
    def active(self) -> bool:
        """Whether ``wandb.log`` calls are still forwarded."""
        return self._active

    @property
    def step(self) -> int:
        """The step wandb logs the next call without ``step=`` to."""
        return self._step

    def _start(self) -> WandbMirror:
        hooks = {"_log": self._wrap_log, "_finish": self._wrap_finish}
        for name in hooks:
            original = getattr(self.wandb_run, name, None)
            if not callable(original):
                raise TypeError(
                    f"this wandb ({_wandb_version()}) has no Run.{name}, which the mirror "
                    "hooks into; the mirror is tested with wandb 0.31"
                )
            other = getattr(original, "_normwatch_mirror", None)
            if isinstance(other, WandbMirror) and other.active:
                raise ValueError(
                    "this wandb run is already mirrored; call stop() on that mirror first"
                )
        run_vars = vars(self.wandb_run)
        for name, wrap in hooks.items():
            wrapper = wrap(getattr(self.wandb_run, name))
            wrapper._normwatch_mirror = self  # type: ignore[attr-defined]
            self._installed[name] = (wrapper, run_vars.get(name, _ABSENT))
            setattr(self.wandb_run, name, wrapper)
        self._active = True
        return self

    def stop(self) -> None:
        """Hand the step wandb has not committed yet to the tracker and stop forwarding.
        Calling it again does nothing; it never raises."""
        with self._lock:
            if not self._active:
                return
            self._active = False
            self._hand_over()
        run_vars = vars(self.wandb_run)
        for name, (wrapper, previous) in self._installed.items():
            # Another wrapper installed on top of ours keeps calling ours, which now only
            # passes through; taking ours out from under it would unhook that one too.
            if run_vars.get(name) is not wrapper:
                continue
            try:
                if previous is _ABSENT:
                    delattr(self.wandb_run, name)
                else:
                    setattr(self.wandb_run, name, previous)
            except Exception:
                logger.exception("could not unhook the wandb run's %s", name)

    def _wrap_log(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def _log(data: Any, step: Any = None, commit: Any = None) -> Any:
            with self._lock:
                result = original(data, step, commit)
                if self._active:
                    self._forward(data, step, commit)
                return result

        return _log

    def _wrap_finish(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def _finish(exit_code: int | None = None, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(exit_code, *args, **kwargs)
            finally:
                self._after_wandb_finish(exit_code)

        return _finish

    def _forward(self, data: Mapping[str, object], step: Any, commit: Any) -> None:
        try:
            if step is not None and _tensorboard_synced():
                step = None  # wandb does not send the step then (see Run._log)
            explicit = None if step is None else operator.index(step)
            flush = None if commit is None else bool(commit)
            landed, self._step = next_wandb_step(self._step, explicit, flush)
            if landed is None:
                return
            if landed != self._row_step:
                self._hand_over()
                self._row_step = landed
            self._row.update(scalar_metrics(data, self._separator))
            if self._step != landed:  # committed
                self._hand_over()
        except Exception as exc:
            self._warn_once(
                f"forward:{type(exc).__name__}", "could not mirror a wandb.log call: %s", exc
            )

    def _hand_over(self) -> None:
        """Log the uncommitted step's values to the tracker (lock held)."""
        row, self._row = self._row, {}
        if row:
            try:
                self.tracker.log(row, step=self._row_step)
            except Exception as exc:
                self._warn_once(
                    f"forward:{type(exc).__name__}", "could not mirror a wandb.log call: %s", exc
                )

    def _after_wandb_finish(self, exit_code: int | None) -> None:
        was_active = self._active
        self.stop()
        if not (was_active and self._finish_tracker):
            return
        try:
            self.tracker.finish(self._finish_timeout, "failed" if exit_code else "finished")
        except Exception:
            logger.exception("finishing %r with the wandb run failed", self.tracker)


_ABSENT = object()


def _wandb_version() -> str:
    module = sys.modules.get("wandb")
    return f"wandb {getattr(module, '__version__', '?')}"


def _tensorboard_synced() -> bool:
    patched = getattr(sys.modules.get("wandb"), "patched", None)
    return bool(isinstance(patched, Mapping) and patched.get("tensorboard"))


def mirror_wandb(
    tracker: Tracker | None = None,
    *,
    wandb_run: WandbRun | None = None,
    name: str | None = None,
    url: str | None = None,
    token: str | None = None,
    project: str | None = None,
    finish: bool = True,
    finish_timeout: float = 30.0,
    separator: str = ".",
    **run_options: Any,
) -> WandbMirror:
    """Forward every later ``wandb.log`` of ``wandb_run`` (default: ``wandb.run``) to
    ``tracker``, at the step wandb records; returns the `WandbMirror` (``.stop()``).

    Without ``tracker``, a `Run` is made: ``name`` defaults to the wandb run's name (its id
    when it has none), ``url`` and ``token`` to ``$NORMWATCH_URL`` and ``$NORMWATCH_TOKEN``,
    ``project`` to the token's project, the config to ``wandb.config``, ``start_step`` to
    W&B's current step; other keyword arguments go to `Run`. ``NORMWATCH_MODE=disabled``
    mirrors into a `NoopTracker`. ``finish``: finish the tracker when the wandb run
    finishes, waiting at most ``finish_timeout`` seconds.
    """
    if wandb_run is None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError(
                "mirror_wandb mirrors a wandb run, and wandb is not installed: pip install wandb"
            ) from exc
        wandb_run = wandb.run
        if wandb_run is None:
            raise ValueError(
                "mirror_wandb needs a wandb run: call wandb.init() first, or pass wandb_run="
            )
    if getattr(getattr(wandb_run, "_settings", None), "_shared", False):
        raise ValueError(
            "wandb runs in shared mode have their steps numbered by the W&B server, so "
            "there is no step to mirror; log to a normwatch Run directly"
        )
    step = _current_step(wandb_run)
    if tracker is None:
        tracker = _new_run(wandb_run, step, name, url, token, project, run_options)
    elif name or url or token or project or run_options:
        raise ValueError(
            "pass either a tracker or the arguments of a new Run (name=, url=, token=, "
            "project=...), not both"
        )
    mirror = WandbMirror(
        tracker,
        wandb_run,
        step=step,
        finish=finish,
        finish_timeout=finish_timeout,
        separator=separator,
    )
    return mirror._start()


def _current_step(wandb_run: WandbRun) -> int:
    try:
        return int(wandb_run.step)
    except Exception:  # a disabled run has no service to ask
        return int(getattr(wandb_run, "_starting_step", 0) or 0)


def _new_run(
    wandb_run: WandbRun,
    step: int,
    name: str | None,
    url: str | None,
    token: str | None,
    project: str | None,
    run_options: dict[str, Any],
) -> Tracker:
    if reporting_disabled():
        return NoopTracker()
    url, token = server_and_token(url, token, needed_by="mirror_wandb")
    run_options.setdefault("config", _config_of(wandb_run))
    run_options.setdefault("start_step", step)
    return Run(
        url,
        token=token,
        project=project,
        name=name or wandb_run.name or wandb_run.id,
        **run_options,
    )


def _config_of(wandb_run: WandbRun) -> dict[str, object]:
    config: Any = wandb_run.config  # wandb's Config is not annotated
    try:
        return dict(config.as_dict())
    except Exception as exc:
        logger.warning("could not read wandb.config for the normwatch run: %s", exc)
        return {}
