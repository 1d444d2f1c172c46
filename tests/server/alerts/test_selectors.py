"""Which metrics and runs a rule selects: metric globs and run name and tag filters."""

from __future__ import annotations

import pytest
from normwatch.server.alerts.selectors import metric_matches, run_matches


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("grad/norm/layers.*", "grad/norm/layers.12", True),
        ("grad/norm/layers.*", "grad/norm/layers.12.mlp.w1", True),
        ("grad/norm/layers.*", "grad/norm/layers.12/w1", False),
        ("grad/norm/layers.*", "grad/norm/layersX12", False),  # the dot is literal
        ("grad/norm/*", "grad/norm/total", True),
        ("*/norm/total", "grad/norm/total", True),
        ("*/norm/total", "a/grad/norm/total", False),
        ("grad/**", "grad/norm/layers.3/w1", True),
        ("grad/**/w1", "grad/w1", True),
        ("grad/**/w1", "grad/norm/layers.3/w1", True),
        ("grad/**/w1", "grad/norm/xw1", False),
        ("**/total", "total", True),
        ("**", "anything/at/all", True),
        ("grad/norm/layers.?", "grad/norm/layers.7", True),
        ("grad/norm/layers.?", "grad/norm/layers.17", False),
        ("grad/norm/layers.[0-4]", "grad/norm/layers.3", True),
        ("grad/norm/layers.[!0-4]", "grad/norm/layers.7", True),
        ("grad/norm/layers.[!0-4]", "grad/norm/layers.3", False),
        ("a[!x]b", "a/b", False),
        ("a[b", "a[b", True),
        ("a[]]b", "a]b", True),
        ("loss (z)+", "loss (z)+", True),
        ("optim/total grad norm", "optim/total grad norm", True),
        ("grad/norm/total", "grad/norm/total2", False),
        ("a[&&~~]b", "a&b", True),
    ],
)
def test_metric_matches(pattern: str, name: str, expected: bool) -> None:
    assert metric_matches(pattern, name) is expected


def test_run_matches() -> None:
    assert run_matches("*", [], "marin/32b-exp1295", ["32b"])  # * crosses / for run names
    assert run_matches(None, ["32b"], "x", ["32b", "moe"])
    assert run_matches("32b-exp*", ["32b", "moe"], "32b-exp1295", ["moe", "32b", "prod"])
    assert not run_matches("32b-exp*", ["32b", "moe"], "32b-exp1295", ["32b"])
    assert not run_matches("7b-*", [], "32b-exp1295", [])
