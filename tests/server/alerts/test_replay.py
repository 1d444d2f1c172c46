"""A rule's fast replay against `evaluation.preview`, its reference: the same transitions,
every field equal, on real and simulated training runs and on series made to sit on a
boundary."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import normwatch
from normwatch.demo import DEMO_RULES
from normwatch.server.alerts.conditions import parse_condition
from normwatch.server.alerts.evaluation import preview
from normwatch.server.alerts.replay import replay, window_fits
from normwatch.server.analytics.fit import fit_line
from normwatch.simulate import SimulatedRun

LLMC_LOG = Path(normwatch.__file__).parent / "data" / "llmc_gpt2_124M_modded-nanogpt.log"


def llmc_grad_norm() -> tuple[list[int], list[float]]:
    """The grad norm of a real GPT-2 124M run (llm.c's log), step by step."""
    steps, norms = [], []
    for line in LLMC_LOG.read_text().splitlines():
        if match := re.match(r"s:(\d+) trl:\S+ lr:\S+ norm:(\S+)", line):
            steps.append(int(match[1]))
            norms.append(float(match[2]))
    return steps, norms


def demo_series(metric: str, start: int, stop: int) -> tuple[list[int], list[float]]:
    """The demo run's ``metric`` over ``[start, stop)``, as ``normwatch demo`` logs it."""
    steps, values = SimulatedRun(seed=0).block(start, stop, layer_every=100)
    kept = ~np.isnan(values[metric])
    return steps[kept].tolist(), values[metric][kept].tolist()


RULES: list[dict[str, Any]] = [
    {"kind": "forecast", "op": ">=", "value": 5.0, "within_steps": 2000, "window": 500},
    {"kind": "forecast", "op": "<=", "value": 1.0, "within_steps": 300, "window": 50},
    {"kind": "forecast", "op": ">", "value": 1.5, "within_steps": 100, "window": 20,
     "resolve_steps": 3, "cooldown_steps": 50},
    {"kind": "slope", "op": ">", "per_1k_steps": 0.0, "window": 100},
    {"kind": "slope", "op": "<=", "per_1k_steps": -0.5, "window": 30, "for_steps": 3},
    {"kind": "spike", "factor": 1.6, "window": 50},
    {"kind": "spike", "factor": 3.0, "window": 50, "resolve_steps": 2, "min_history": 10},
    {"kind": "threshold", "op": ">=", "value": 5.0, "for_steps": 3, "resolve_value": 4.0},
    {"kind": "non_finite"},
]  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r['kind']}-{r.get('op', '')}")
@pytest.mark.parametrize("repeat", [200])
def test_real_run_matches_reference(rule: dict[str, Any], repeat: int | None) -> None:
    condition = parse_condition(rule)
    steps, norms = llmc_grad_norm()
    expected = preview(condition, steps, norms, repeat_every_steps=repeat)
    assert replay(condition, steps, norms, repeat_every_steps=repeat) == expected


@pytest.mark.parametrize("rule", DEMO_RULES, ids=lambda r: str(r["name"]))
def test_demo_rules_match_reference_around_the_config_change(rule: dict[str, Any]) -> None:
    """The demo's own rules over the 20,000 steps around its config change at 81k, where
    its forecast fires and resolves."""
    condition = parse_condition(rule["condition"])
    steps, values = demo_series(str(rule["metric"]), 70_000, 90_000)
    repeat = rule.get("repeat_every_steps")
    expected = preview(condition, steps, values, repeat_every_steps=repeat)
    assert replay(condition, steps, values, repeat_every_steps=repeat) == expected


def test_demo_forecast_fires_and_resolves_there() -> None:
    """The comparison above is not of two empty lists."""
    condition = parse_condition(DEMO_RULES[1]["condition"])
    steps, values = demo_series("grad/norm/total", 70_000, 90_000)
    assert [(t.state, t.step) for t in replay(condition, steps, values)] == [
        ("firing", 82550),
        ("resolved", 83779),
    ]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r['kind']}-{r.get('op', '')}")
def test_gaps_and_non_finite_values_match_reference(rule: dict[str, Any]) -> None:
    """Uneven logging intervals, NaN and infinities, steps far from zero."""
    rng = np.random.default_rng(7)
    steps = (77_096 + np.cumsum(rng.integers(1, 4, 6_000))).tolist()
    walk = 2.0 + np.cumsum(rng.normal(0, 0.02, 6_000)) + 0.3 * np.sin(np.arange(6_000) / 300)
    walk[rng.integers(0, 6_000, 40)] = math.nan
    walk[rng.integers(0, 6_000, 10)] = math.inf
    walk[rng.integers(0, 6_000, 10)] *= 4.0
    values = walk.tolist()
    condition = parse_condition(rule)
    assert replay(condition, steps, values, repeat_every_steps=150) == preview(
        condition, steps, values, repeat_every_steps=150
    )


def test_slopes_exactly_on_the_limit_are_judged_exactly() -> None:
    """A straight line of slope 1 per 1k steps against a limit of exactly 1: rounding
    decides each step, so each is taken exactly, as the reference takes it."""
    steps = list(range(1_000, 3_000))
    values = [s / 1000 for s in steps]
    for op in (">", ">=", "<", "<="):
        condition = parse_condition({"kind": "slope", "op": op, "per_1k_steps": 1.0, "window": 40})
        assert replay(condition, steps, values) == preview(condition, steps, values)


def test_flat_series_has_no_slope_to_judge_by_rounding() -> None:
    steps = list(range(500))
    values = [3.0] * 500
    condition = parse_condition({"kind": "forecast", "value": 5.0, "within_steps": 100})
    assert replay(condition, steps, values) == preview(condition, steps, values) == []


def test_window_fits_match_fit_line() -> None:
    rng = np.random.default_rng(3)
    steps = np.cumsum(rng.integers(1, 5, 300)).astype(np.int64)
    values = rng.normal(1.0, 0.1, 300)
    slope, level, scale = window_fits(steps, values, 25)
    for row in (0, 117, 275):
        fit = fit_line(steps[row : row + 25], values[row : row + 25], origin=steps[row + 24])
        assert fit is not None
        assert slope[row] == pytest.approx(fit.slope, rel=1e-12, abs=1e-15)
        assert level[row] == pytest.approx(fit.level, rel=1e-12)
    dy = values[:25] - values[:25].mean()
    dx = steps[:25] - steps[:25].mean()
    assert scale[0] == pytest.approx(math.sqrt((dy @ dy) / (dx @ dx)), rel=1e-12)


def test_bad_input_is_refused_as_the_reference_refuses_it() -> None:
    condition = parse_condition({"kind": "slope", "per_1k_steps": 1.0, "window": 3})
    with pytest.raises(ValueError, match=r"steps\[2\]: 2 does not follow 3"):
        replay(condition, [1, 3, 2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="differ in length: 2 != 1"):
        replay(condition, [1, 2], [1.0])
