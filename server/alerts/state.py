"""What evaluation keeps and reports: a rule's state on one series (stored as JSON) and the
transitions it notifies.

No I/O. The storing layer keeps one :class:`RuleState` per (rule, run segment, metric) as
the document :meth:`RuleState.to_dict` writes; documents written by older versions stay
readable (the fields they lack take their defaults).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .conditions import MAX_WINDOW, AlertStatus, Finite

__all__ = ["STATE_VERSION", "RuleState", "Transition", "encode", "short"]

STATE_VERSION: Final = 3
"""The version of the documents :meth:`RuleState.to_dict` writes: 2 added the resolve and
repeat bookkeeping, 3 the wall time of the last notification."""


@dataclass
class RuleState:
    """Evaluation state of one rule on one metric of one run segment; JSON via ``to_dict``.

    ``window`` holds the recent finite ``(step, value)`` points the kind needs (empty for
    threshold and non_finite). ``cooldown_until_step``: no firing before that step.
    """

    status: AlertStatus = "ok"
    streak: int = 0
    window: list[tuple[int, float]] = field(default_factory=list)
    last_step: int | None = None
    last_value: float | None = None
    last_seen_unix: float | None = None
    fired_at_step: int | None = None
    cooldown_until_step: int | None = None
    clear: int = 0
    """While firing: consecutive logged steps that count toward resolving."""
    held: int = 0
    """While firing: logged steps since it fired."""
    repeats: int = 0
    """While firing: notifications sent again so far."""
    notified_step: int | None = None
    """While firing: the step of the last notification (firing or repeat)."""
    notified_unix: float | None = None
    """While firing: the wall time (Unix seconds) of the last notification, which the
    rule's ``repeat_every_seconds`` counts from; None where it is not known (a state stored
    before it was kept, or evaluated without arrival times)."""
    worst: float | None = None
    """While firing: the measured value furthest past the threshold so far."""
    handed_over: bool = False
    """A forecast that resolved as crossed: quiet until its steps count as clear again."""

    def to_dict(self) -> dict[str, Any]:
        """A strict-JSON document (non-finite numbers as ``"NaN"``, ``"Infinity"``...)."""
        return {
            "version": STATE_VERSION,
            "clear": self.clear,
            "held": self.held,
            "repeats": self.repeats,
            "notified_step": self.notified_step,
            "notified_unix": self.notified_unix,
            "worst": None if self.worst is None else encode(self.worst),
            "handed_over": self.handed_over,
            "status": self.status,
            "streak": self.streak,
            "window": [[s, v] for s, v in self.window],
            "last_step": self.last_step,
            "last_value": None if self.last_value is None else encode(self.last_value),
            "last_seen_unix": self.last_seen_unix,
            "fired_at_step": self.fired_at_step,
            "cooldown_until_step": self.cooldown_until_step,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RuleState:
        """Inverse of :meth:`to_dict`, for every version; raises ``ValueError`` on a
        malformed document."""
        return _STATE_DOC.validate_python(doc).to_state()


class _StateDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1, 2, 3] = STATE_VERSION
    status: AlertStatus
    streak: int = Field(ge=0)
    window: list[tuple[int, Finite]] = Field(max_length=MAX_WINDOW)
    last_step: int | None
    last_value: float | None
    last_seen_unix: float | None
    fired_at_step: int | None
    cooldown_until_step: int | None
    # Version 2 (resolve and repeat bookkeeping); a version 1 document has none of it.
    clear: int = Field(default=0, ge=0)
    held: int = Field(default=0, ge=0)
    repeats: int = Field(default=0, ge=0)
    notified_step: int | None = None
    worst: float | None = None
    handed_over: bool = False
    # Version 3 (the wall time of the last notification).
    notified_unix: Finite | None = None

    def to_state(self) -> RuleState:
        return RuleState(
            status=self.status,
            streak=self.streak,
            window=list(self.window),
            last_step=self.last_step,
            last_value=self.last_value,
            last_seen_unix=self.last_seen_unix,
            fired_at_step=self.fired_at_step,
            cooldown_until_step=self.cooldown_until_step,
            clear=self.clear,
            held=self.held,
            repeats=self.repeats,
            notified_step=self.notified_step,
            notified_unix=self.notified_unix,
            worst=self.worst,
            handed_over=self.handed_over,
        )


_STATE_DOC = TypeAdapter(_StateDoc)


@dataclass(frozen=True)
class Transition:
    """A state change to notify: ``firing`` or ``resolved`` at ``step``.

    ``threshold`` is the number the payload reports (the rule's value, ``factor · median``
    for a spike, ``per_1k_steps`` for a slope, ``seconds`` for stale, None for non_finite);
    ``measured`` is what was compared with it (the value, the slope per 1k steps, the
    projected steps to crossing, the seconds without a step). ``reason`` leaves out the
    metric's name, which the caller puts in front. ``repeat`` is 0 for a state change and
    n ≥ 1 for the n-th notification of a still-firing alert; ``worst`` the measured value
    furthest past the threshold since it fired (None where that has no meaning).
    """

    state: Literal["firing", "resolved"]
    step: int
    value: float
    threshold: float | None
    measured: float
    reason: str
    fired_at_step: int
    repeat: int = 0
    worst: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON fields, non-finite numbers as strings."""
        return {
            "state": self.state,
            "step": self.step,
            "value": encode(self.value),
            "threshold": None if self.threshold is None else encode(self.threshold),
            "measured": encode(self.measured),
            "reason": self.reason,
            "fired_at_step": self.fired_at_step,
            "repeat": self.repeat,
            "worst": None if self.worst is None else encode(self.worst),
        }


def encode(x: float) -> float | str:
    """A number for strict JSON: non-finite ones as ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def short(x: float) -> str:
    """A number as a reason shows it: four significant digits, ``NaN``, ``±Inf``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return f"{x:.4g}"
