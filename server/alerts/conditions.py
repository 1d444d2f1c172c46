"""Alert conditions: what a rule checks at each logged step (or on the wall clock), as
validated models. How they are evaluated is :mod:`.evaluation`.

========== ======================================== ============================================
kind       satisfied at a step when                 cannot be judged (breaks a pending streak)
========== ======================================== ============================================
threshold  ``value op v`` (±Inf compare as numbers)  value is NaN
non_finite value is NaN, +Inf or -Inf               never
spike      ``value > factor · median(previous W)``  NaN; under ``min_history`` values; median ≤ 0
slope      ``1000 · slope(last W points) op x``     value not finite; fewer than W points
forecast   not yet crossed, slope toward ``v`` and  value not finite; fewer than W points; value
           crossing projected within N steps        already crossed (the threshold rule's job)
stale      wall clock: no new step for ``seconds``  (see `alerts.clock.check_stale`)
========== ======================================== ============================================

A firing alert resolves after ``resolve_steps`` consecutive logged steps with the condition
false (and, for a threshold with ``resolve_value``, past that value too), so a value that
dips under the line for a step or two does not resolve and re-fire. The default is 1 for
threshold, non_finite and slope (as rules stored before the field were written), 5 for
spike (one alert from a spike's start to its recovery) and 10 for forecast. A forecast
counts toward resolving only while no crossing is projected sooner than twice its
``within_steps``, and resolves the moment the value crosses (it hands over to the
threshold rule).

Windows hold finite values only; a non-finite value is the ``non_finite`` kind's business.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

__all__ = [
    "AlertStatus",
    "Comparison",
    "Condition",
    "Finite",
    "ForecastCondition",
    "MAX_STEPS",
    "MAX_WINDOW",
    "NonFiniteCondition",
    "SlopeCondition",
    "SpikeCondition",
    "StaleCondition",
    "StepCondition",
    "ThresholdCondition",
    "parse_condition",
]


Comparison = Literal[">", ">=", "<", "<="]


AlertStatus = Literal["ok", "pending", "firing"]


# Bounds the JSON state of one (rule, run, metric) and the O(window) work per point
# (about 0.15 ms per point for a slope over 1000 points).
MAX_WINDOW = 2_000


MAX_STEPS = 2**62
"""Bounds step counts in conditions: any run fits, and every sum of them stays in int64."""


Finite = Annotated[float, Field(allow_inf_nan=False)]


_Window = Annotated[int, Field(ge=2, le=MAX_WINDOW, description="Number of logged points.")]


class _StepRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    for_steps: int = Field(
        default=1,
        ge=1,
        le=MAX_STEPS,
        description="Consecutive logged steps that must satisfy it to fire.",
    )
    cooldown_steps: int = Field(
        default=0,
        ge=0,
        le=MAX_STEPS,
        description="After a resolve, steps to wait before firing again (a condition still "
        "true when they are over fires then).",
    )
    resolve_steps: int = Field(
        default=1,
        ge=1,
        le=MAX_STEPS,
        description="Consecutive logged steps with the condition false before a firing "
        "alert resolves.",
    )


class ThresholdCondition(_StepRule):
    """``value op threshold``, e.g. the total grad norm reaching 5."""

    kind: Literal["threshold"] = "threshold"
    op: Comparison
    value: Finite
    resolve_value: Finite | None = Field(
        default=None,
        description="Resolve only past this value (fire at >= 5, resolve below 4): a step "
        "between the two keeps a firing alert firing.",
    )

    @model_validator(mode="after")
    def _resolve_value_on_the_resolving_side(self) -> ThresholdCondition:
        if self.resolve_value is None:
            return self
        upward = self.op in (">", ">=")
        if (upward and self.resolve_value > self.value) or (
            not upward and self.resolve_value < self.value
        ):
            side = "at or below" if upward else "at or above"
            raise ValueError(
                f"resolve_value ({self.resolve_value:g}) must be {side} the threshold "
                f"({self.value:g}) for {self.op}: it is where a firing alert stops"
            )
        return self

    def cleared(self, value: float) -> bool:
        """Whether ``value`` is past ``resolve_value`` (any value when there is none)."""
        if self.resolve_value is None:
            return True
        if self.op in (">", ">="):
            return value < self.resolve_value
        return value > self.resolve_value


class NonFiniteCondition(_StepRule):
    """The value is NaN, +Inf or -Inf."""

    kind: Literal["non_finite"] = "non_finite"


class SpikeCondition(_StepRule):
    """``value > factor · median`` of the previous ``window`` finite values."""

    kind: Literal["spike"] = "spike"
    resolve_steps: int = Field(
        default=5,
        ge=1,
        le=MAX_STEPS,
        description="Consecutive logged steps back under the limit before a spike resolves.",
    )
    factor: Finite = Field(default=2.0, gt=1.0)
    window: Annotated[int, Field(ge=1, le=MAX_WINDOW)] = 50
    min_history: int | None = Field(
        default=None,
        ge=1,
        le=MAX_WINDOW,
        description="Values needed before judging; default window // 2.",
    )

    @model_validator(mode="after")
    def _history_fits_window(self) -> SpikeCondition:
        if self.min_history is not None and self.min_history > self.window:
            raise ValueError(
                f"min_history ({self.min_history}) cannot exceed window ({self.window}); "
                "lower min_history or widen the window"
            )
        return self

    @property
    def history_needed(self) -> int:
        """``min_history``, or ``max(1, window // 2)`` when not given."""
        return self.min_history if self.min_history is not None else max(1, self.window // 2)


class SlopeCondition(_StepRule):
    """``1000 · slope op per_1k_steps``, the least-squares slope of value against step over
    the last ``window`` finite points (points, not steps: logging intervals may vary)."""

    kind: Literal["slope"] = "slope"
    op: Comparison = ">"
    per_1k_steps: Finite
    window: _Window = 100


class ForecastCondition(_StepRule):
    """The trend of the last ``window`` points reaches ``op value`` within ``within_steps``.

    With the least-squares line of :func:`linear_fit` (``slope`` per step, ``level`` its
    value at the current step), the projected steps to the crossing are
    ``(value - level) / slope``. Satisfied when the current value has not crossed yet, the
    slope points toward ``value`` (up for ``>``/``>=``, down for ``<``/``<=``) and the
    projection is below ``within_steps`` (a line already past ``value`` counts).
    """

    kind: Literal["forecast"] = "forecast"
    resolve_steps: int = Field(
        default=10,
        ge=1,
        le=MAX_STEPS,
        description="Consecutive logged steps with no crossing projected before it resolves.",
    )
    op: Comparison = ">="
    value: Finite
    within_steps: int = Field(ge=1, le=MAX_STEPS)
    window: _Window = 100


class StaleCondition(BaseModel):
    """No new step for ``seconds`` of wall-clock time."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["stale"] = "stale"
    seconds: Finite = Field(gt=0, le=10 * 366 * 86_400, description="At most ten years.")


StepCondition: TypeAlias = (
    ThresholdCondition | NonFiniteCondition | SpikeCondition | SlopeCondition | ForecastCondition
)


Condition: TypeAlias = Annotated[StepCondition | StaleCondition, Field(discriminator="kind")]


_CONDITION: TypeAdapter[StepCondition | StaleCondition] = TypeAdapter(Condition)


def parse_condition(doc: object) -> StepCondition | StaleCondition:
    """Validate a condition's JSON; raises ``pydantic.ValidationError`` (a ``ValueError``)."""
    return _CONDITION.validate_python(doc)
