"""Levanter's tracker interface, transcribed: what `normwatch.client.levanter` must fit.

From ``src/levanter/tracker/tracker.py`` of Levanter (stanford-crfm/levanter at 9263f81,
and marin-levanter 0.2.20, which adds ``log_html`` and the ``_prepare_*`` hooks): the
abstract methods of ``Tracker`` with their parameters (names, kinds and defaults as there;
annotations spelled as in this project), and ``TrackerConfig``, a draccus
``PluginRegistry`` whose choices a config names with ``type:``. Levanter's package itself
is no test dependency (see `normwatch.client.levanter`); this is the part of it a tracker
backend is written against. Being a package, it is also the ``discover_packages_path``
draccus imports, as Levanter's is ``levanter.tracker``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from typing import Any

import draccus


class Tracker(abc.ABC):
    name: str

    @abc.abstractmethod
    def log_hyperparameters(self, hparams: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def log(
        self, metrics: Mapping[str, Any], *, step: int | None, commit: bool | None = None
    ) -> None: ...

    @abc.abstractmethod
    def log_summary(self, metrics: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def log_artifact(
        self, artifact_path: Any, *, name: str | None = None, type: str | None = None
    ) -> None: ...

    @abc.abstractmethod
    def finish(self) -> None: ...

    def log_html(  # noqa: B027 (Levanter's default does nothing)
        self, key: str, html_path: Any, *, step: int | None, commit: bool | None = None
    ) -> None:
        pass

    def _prepare_log(self, metrics: Mapping[str, Any]) -> Any:
        # Levanter's default is jax.device_get(metrics) on the training thread: a wait for
        # the step, which a normwatch tracker must not inherit.
        raise AssertionError("_prepare_log must not fetch device values")


class TrackerConfig(draccus.PluginRegistry, abc.ABC):
    discover_packages_path = "tests.helpers.levanter_interface"

    @abc.abstractmethod
    def init(self, run_id: str | None) -> Tracker: ...

    @classmethod
    def default_choice_name(cls) -> str | None:
        return "noop"


class NoopTracker(Tracker):
    name: str = "noop"

    def log_hyperparameters(self, hparams: dict[str, Any]) -> None:
        pass

    def log(
        self, metrics: Mapping[str, Any], *, step: int | None, commit: bool | None = None
    ) -> None:
        pass

    def log_summary(self, metrics: dict[str, Any]) -> None:
        pass

    def log_artifact(
        self, artifact_path: Any, *, name: str | None = None, type: str | None = None
    ) -> None:
        pass

    def finish(self) -> None:
        pass


@TrackerConfig.register_subclass("noop")
@dataclasses.dataclass
class NoopConfig(TrackerConfig):
    def init(self, run_id: str | None) -> Tracker:
        return NoopTracker()
