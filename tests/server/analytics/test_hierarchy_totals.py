"""The hierarchy rule on totals: a ``…/total`` is the aggregate of its siblings, so a glob,
attribution or the layer grid that meets it beside its parts counts the parts only.

The run is the simulator's (`normwatch.simulate`), whose ``<family>/total`` is the root of
its parts' summed squares at every step, logged with every part at every step; a second run
nests a total one level down (``grad/norm/layers.0/total`` beside ``layers.0/attn`` and
``layers.0/mlp``). Both are written and read through the services on both backends. A
property test checks the rule on random trees of names against the norms they stand for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session

from normwatch.server.analytics import derived
from normwatch.server.analytics.hierarchy import outermost, total_prefix
from normwatch.server.analytics.layers import u_index
from normwatch.server.batch import parse_batch
from normwatch.server.db import session_scope
from normwatch.server.models import AlertState
from normwatch.server.schemas import RunCreate
from normwatch.server.schemas.alerts import AlertRuleCreate
from normwatch.server.services import alert_rules, ingest, query, runs
from normwatch.server.services.attribution import attribution
from normwatch.server.services.layers import layer_grid
from normwatch.simulate import FAMILIES, SimulatedRun
from tests.helpers.committed import Sessions, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions
from tests.helpers.principals import principal

STEPS = 300
LAYERS = 4


@pytest.fixture(scope="module")
def simulated() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every metric of a 4-layer simulated run at every one of 300 steps."""
    steps, metrics = SimulatedRun(seed=3, n_layers=LAYERS).block(0, STEPS, layer_every=1)
    assert all(np.isfinite(v).all() for v in metrics.values())
    return steps, metrics


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "totals", tmp_path_factory) as made:
        yield made


@pytest.fixture(scope="module")
def run_id(sessions: Sessions, simulated: tuple[np.ndarray, dict[str, np.ndarray]]) -> str:
    run = new_run(sessions)
    steps, metrics = simulated
    post(sessions, run, steps, **metrics)
    return run


def nested_parts(n: int) -> dict[str, np.ndarray]:
    """A family whose layer 0 logs its total beside its two parts, and the family total
    over every part; each total the root of its parts' summed squares."""
    rng = np.random.default_rng(11)
    leaves = {
        name: rng.lognormal(-2.0, 0.3, n)
        for name in ("embed", "layers.0/attn", "layers.0/mlp", "layers.1", "lm_head")
    }
    metrics = {f"grad/norm/{name}": values for name, values in leaves.items()}
    layer = np.sqrt(leaves["layers.0/attn"] ** 2 + leaves["layers.0/mlp"] ** 2)
    metrics["grad/norm/layers.0/total"] = layer
    metrics["grad/norm/total"] = np.sqrt(sum(v**2 for v in leaves.values()))
    return metrics


@pytest.fixture(scope="module")
def nested_id(sessions: Sessions) -> str:
    run = new_run(sessions, name="nested")
    post(sessions, run, np.arange(50), **nested_parts(50))
    return run


def read(sessions: Sessions, run_id: str, *texts: str) -> list[query.Series]:
    with session_scope(sessions) as session:
        return query.read_series(session, the_run(session, run_id), list(texts), points=STEPS)


def relative_error(got: object, expected: np.ndarray) -> float:
    values = np.asarray(got, dtype=np.float64)
    assert values.shape == expected.shape
    return float(np.max(np.abs(values - expected) / np.abs(expected)))


# -- rss, share and ratio ---------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("glob", ["*", "**"])
def test_rss_of_a_family_glob_is_its_exact_total(
    sessions: Sessions,
    run_id: str,
    simulated: tuple[np.ndarray, dict[str, np.ndarray]],
    family: str,
    glob: str,
) -> None:
    """The glob matches ``<family>/total`` beside every part: the total gives way, and the
    parts' root-sum-square is the total itself (it read √2 × the total before)."""
    _, metrics = simulated
    (got,) = read(sessions, run_id, f"rss({family}/{glob})")
    assert got.steps.tolist() == list(range(STEPS))
    assert relative_error(got.values, metrics[f"{family}/total"]) <= 1e-12


def test_share_and_ratio_of_a_glob_over_the_total_are_one(
    sessions: Sessions, run_id: str, simulated: tuple[np.ndarray, dict[str, np.ndarray]]
) -> None:
    _, metrics = simulated
    share, ratio, nested, lm_head = read(
        sessions,
        run_id,
        "share(grad/norm/*, grad/norm/total)",
        "ratio(updates/norm/**, updates/norm/total)",
        "ratio(rss(params/norm/*), params/norm/total)",
        "share(grad/norm/lm_*, grad/norm/*)",
    )
    ones = np.ones(STEPS)
    for got in (share, ratio, nested):
        assert relative_error(got.values, ones) <= 2e-12
    # A glob on either side stands for its rss: the lm_head's share of the parts is its
    # share of the total.
    expected = (metrics["grad/norm/lm_head"] / metrics["grad/norm/total"]) ** 2
    assert relative_error(lm_head.values, expected) <= 2e-12


def test_a_glob_that_meets_no_sibling_of_a_total_keeps_it(
    sessions: Sessions, run_id: str, simulated: tuple[np.ndarray, dict[str, np.ndarray]]
) -> None:
    _, metrics = simulated
    alone, totals, exact = read(
        sessions, run_id, "rss(grad/norm/tot*)", "rss(**/total)", "rss(grad/norm/total)"
    )
    assert alone.values.tolist() == metrics["grad/norm/total"].tolist()
    assert exact.values.tolist() == metrics["grad/norm/total"].tolist()
    # Five totals (grad, params, updates and Adam's two moments), none beside a part.
    names = [n for n in metrics if n.endswith("/total")]
    assert len(names) == 5
    expected = np.sqrt(sum(metrics[n] ** 2 for n in names))
    assert relative_error(totals.values, expected) <= 1e-12


def test_a_nested_total_gives_way_to_its_parts(sessions: Sessions, nested_id: str) -> None:
    metrics = nested_parts(50)
    everything, layer, partial = read(
        sessions, nested_id, "rss(grad/norm/**)", "rss(grad/norm/layers.0/*)", "rss(grad/norm/*)"
    )
    assert relative_error(everything.values, metrics["grad/norm/total"]) <= 1e-12
    assert relative_error(layer.values, metrics["grad/norm/layers.0/total"]) <= 1e-12
    # ``*`` stays within a segment: beside the total it meets embed, layers.1 and lm_head
    # only, and those are what it counts.
    ends = np.sqrt(sum(metrics[f"grad/norm/{p}"] ** 2 for p in ("embed", "layers.1", "lm_head")))
    assert relative_error(partial.values, ends) <= 1e-12


# -- attribution and layers -------------------------------------------------------------------


@pytest.mark.parametrize("by", ["group", "part"])
def test_attribution_counts_the_parts_and_its_sum_check_holds(
    sessions: Sessions, run_id: str, nested_id: str, by: str
) -> None:
    with session_scope(sessions) as session:
        flat = attribution(session, the_run(session, run_id), "grad/norm", by=by)
        nested = attribution(session, the_run(session, nested_id), "grad/norm", by=by)
    for got in (flat, nested):
        assert not any(group.endswith("total") for group in got.groups)
        assert got.mismatched == []
        assert all(s is not None and abs(s - 1.0) <= 1e-12 for s in got.sum), got.sum
    if by == "part":
        assert nested.groups == ["embed", "layers.0/attn", "layers.0/mlp", "layers.1", "lm_head"]


def test_layer_rows_are_the_parts_never_a_total(
    sessions: Sessions,
    run_id: str,
    nested_id: str,
    simulated: tuple[np.ndarray, dict[str, np.ndarray]],
) -> None:
    _, metrics = simulated
    with session_scope(sessions) as session:
        grid = layer_grid(session, the_run(session, run_id), "grad/norm", points=STEPS)
        nested = layer_grid(session, the_run(session, nested_id), "grad/norm", points=50)
    parts = ["embed", *(f"layers.{i}" for i in range(LAYERS)), "final_norm.weight", "lm_head"]
    assert grid.layers == parts
    rows = np.array([metrics[f"grad/norm/{p}"] for p in parts])
    np.testing.assert_array_equal(np.array(grid.values), rows)
    np.testing.assert_allclose(np.array(grid.u_index, dtype=float), u_index(rows), rtol=1e-15)
    assert nested.layers == ["embed", "layers.0/attn", "layers.0/mlp", "layers.1", "lm_head"]


# -- alert rules --------------------------------------------------------------------------------


def test_an_alert_on_the_rss_of_a_family_counts_its_parts_once(db_session: Session) -> None:
    """A derived rule is evaluated on each ingested batch: ``rss(grad/norm/*) > 1.2`` over
    parts whose total is 1 stays quiet (it read √2 and fired before)."""
    who = principal(db_session, "ingest")
    made = runs.create_or_resume(db_session, who, RunCreate(name="alerted"))
    found = runs.get_run(db_session, made.id)
    assert found is not None
    run, project = found
    admin = principal(db_session, "admin", project=project)
    condition = {"kind": "threshold", "op": ">", "value": 1.2}
    rules = [
        alert_rules.create_rule(
            db_session, admin, AlertRuleCreate(name=name, metric=metric, condition=condition), ()
        )
        for name, metric in (("parts", "rss(grad/norm/*)"), ("both", "rss(grad/norm/**)"))
    ]
    body = {
        "steps": [0, 1],
        "metrics": {
            "grad/norm/total": [1.0, 1.0],
            "grad/norm/layers.0": [0.6, 0.8],
            "grad/norm/lm_head": [0.8, 0.6],
        },
    }
    ingest.ingest_batch(db_session, made.id, parse_batch(body, max_points=100))
    states = db_session.scalars(select(AlertState).where(AlertState.run_key == run.key)).all()
    assert {s.rule_id for s in states} == {r.id for r in rules}
    assert [s.state for s in states] == ["ok", "ok"]


# -- random trees of names ------------------------------------------------------------------------


@st.composite
def norm_trees(draw: st.DrawFn) -> tuple[dict[str, float], float]:
    """Logged norms of a random model tree, and the norm of the whole.

    Each inner node is logged as itself (``X``, its children ``X.c`` or ``X/c``), as a
    total (``X/total`` beside its children ``X/c``), as both, or not at all; every leaf is
    logged. An inner node's norm is the root of its children's summed squares.
    """
    logged: dict[str, float] = {}
    counter = iter(range(10_000))

    def node(name: str, depth: int) -> float:
        if depth == 0 or draw(st.booleans()):
            value = draw(st.floats(0.01, 100.0))
            logged[name] = value
            return value
        sep = "/" if draw(st.booleans()) else "."
        children = draw(st.integers(1, 4))
        norm = math.sqrt(
            sum(node(f"{name}{sep}c{next(counter)}", depth - 1) ** 2 for _ in range(children))
        )
        how = draw(st.sampled_from(["itself", "total", "both", "unlogged"]))
        if how in ("itself", "both"):
            logged[name] = norm
        if how in ("total", "both") and sep == "/":
            logged[f"{name}/total"] = norm
        return norm

    children = draw(st.integers(1, 5))
    whole = math.sqrt(sum(node(f"g/c{next(counter)}", 3) ** 2 for _ in range(children)))
    if draw(st.booleans()):
        logged["g/total"] = whole
    return logged, whole


@settings(max_examples=300, deadline=None)
@given(norm_trees(), st.randoms(use_true_random=False))
def test_the_counted_names_of_any_tree_add_up_to_its_norm(
    tree: tuple[dict[str, float], float], order: object
) -> None:
    """Whatever mix of layers, totals and leaves is logged, in any order, the names the rule
    keeps count each leaf once: their root-sum-square is the whole model's norm. The rss
    of `derived.evaluate` over them, as a glob's, gives the same."""
    logged, whole = tree
    names = list(logged)
    order.shuffle(names)  # type: ignore[attr-defined]
    kept = outermost(names)
    assert kept == [n for n in names if n in set(kept)]  # in their order, each once
    assert math.isclose(math.sqrt(sum(logged[n] ** 2 for n in kept)), whole, rel_tol=1e-12)
    # No total stays beside a name that starts with its prefix.
    for name in kept:
        prefix = total_prefix(name)
        if prefix is not None:
            assert not any(o != name and o.startswith(prefix) for o in kept)
    steps = np.arange(1)
    series = [(steps, np.array([logged[n]])) for n in kept]
    _, values = derived.evaluate(derived.parse("rss(g/**)"), {"g/**": series})
    assert math.isclose(float(values[0]), whole, rel_tol=1e-12)
