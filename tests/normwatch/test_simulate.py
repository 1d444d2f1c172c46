"""`normwatch.simulate` reproduces each phenomenon of the domain, for several seeds."""

from __future__ import annotations

import time

import numpy as np
import pytest
from numpy.typing import NDArray

from normwatch.simulate import DENSE_AFTER, DENSE_BEFORE, FAMILIES, SimulatedRun

SEEDS = [0, 1, 7]
EVENT = 81_000
STOP = 120_000
Block = tuple[SimulatedRun, NDArray[np.int64], dict[str, NDArray[np.float64]]]


@pytest.fixture(scope="module", params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def simulated(request: pytest.FixtureRequest) -> Block:
    run = SimulatedRun(seed=request.param)
    steps, metrics = run.block(0, STOP, layer_every=10)
    return run, steps, metrics


def slope(values: NDArray[np.float64], start: int, stop: int) -> float:
    """Least-squares slope per step over ``values[start:stop]``."""
    x = np.arange(start, stop, dtype=np.float64)
    return float(np.polyfit(x, values[start:stop], 1)[0])


def test_final_norm_grows_and_steepens_after_the_event(simulated: Block) -> None:
    _, _, metrics = simulated
    gain = metrics["params/norm/final_norm.weight"]
    assert gain[0] == pytest.approx(78.4, abs=2.0)
    assert 320.0 <= gain[80_000] <= 360.0
    assert gain[85_000] > 360.0
    assert np.all(np.diff(gain) > 0)
    assert slope(gain, EVENT + 500, EVENT + 4000) > 2.5 * slope(gain, EVENT - 5000, EVENT - 500)


def test_grad_norm_tracks_the_gain_and_crosses_5_only_after_the_event(simulated: Block) -> None:
    _, _, metrics = simulated
    grad_norm = metrics["grad/norm/total"]
    assert grad_norm[:EVENT].max() < 5.0
    assert 0.3 <= np.median(grad_norm[5_000:6_000]) <= 1.0
    assert 0.3 <= np.median(grad_norm[79_000:80_000]) <= 1.0
    assert np.median(grad_norm[79_000:80_000]) > 1.5 * np.median(grad_norm[10_000:11_000])
    first_crossing = int(np.argmax(grad_norm >= 5.0))
    assert 83_000 <= first_crossing <= 86_000


def in_spike_windows(run: SimulatedRun, steps: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Steps within ``[u - DENSE_BEFORE, u + DENSE_AFTER]`` of a spike's update step ``u``."""
    inside = np.zeros(len(steps), dtype=bool)
    for spike in run.spikes:
        inside |= (steps >= spike.update_step - DENSE_BEFORE) & (
            steps <= spike.update_step + DENSE_AFTER
        )
    return inside


def test_per_part_metrics_are_logged_on_the_schedule_and_densely_at_spikes(
    simulated: Block,
) -> None:
    run, steps, metrics = simulated
    expected = (steps % 10 == 0) | in_spike_windows(run, steps)
    assert expected.sum() > STOP // 10 + len(run.spikes) * 100
    for name in run.layer_names():
        np.testing.assert_array_equal(~np.isnan(metrics[name]), expected, err_msg=name)
    for spike in run.spikes:
        window = slice(spike.update_step - DENSE_BEFORE, spike.update_step + DENSE_AFTER + 1)
        assert not np.isnan(metrics["updates/norm/layers.0"][window]).any()
    np.testing.assert_array_equal(run.per_layer_logged(steps, layer_every=10), expected)
    for name in ["params/norm/final_norm.weight", *(f"{f}/total" for f in FAMILIES)]:
        assert not np.isnan(metrics[name]).any(), name


def test_each_total_is_the_root_sum_square_of_its_parts(simulated: Block) -> None:
    run, _, metrics = simulated
    parts = run.parts()
    assert parts == ["embed", *(f"layers.{i}" for i in range(run.n_layers))] + [
        "final_norm.weight",
        "lm_head",
    ]
    for family in FAMILIES:
        prefix = f"{family}/"
        logged_parts = sorted(n[len(prefix) :] for n in metrics if n.startswith(prefix))
        assert logged_parts == sorted([*parts, "total"]), family
        logged = ~np.isnan(metrics[f"{family}/embed"])
        assert logged.sum() >= STOP // 10
        values = np.array([metrics[f"{family}/{part}"][logged] for part in parts])
        total = metrics[f"{family}/total"][logged]
        assert not np.isnan(values).any()
        np.testing.assert_allclose(total**2, (values**2).sum(axis=0), rtol=1e-12, atol=0)
        assert np.all(values <= total), family
        assert np.all(values > 0), family


def test_lm_head_share_of_the_squared_grad_norm_grows_past_the_event(simulated: Block) -> None:
    _, _, metrics = simulated
    share = (metrics["grad/norm/lm_head"] / metrics["grad/norm/total"]) ** 2
    assert 0.2 <= share[1_000] <= 0.35
    assert 0.5 <= share[80_000] <= 0.7
    assert share[90_000] >= 0.8
    around = {step: float(np.nanmedian(share[step - 500 : step + 500])) for step in (1_000, 80_000)}
    assert 0.2 <= around[1_000] <= 0.35 and 0.5 <= around[80_000] <= 0.7
    assert np.nanmin(share[90_000:STOP]) >= 0.75


def u_ratio(run: SimulatedRun, metrics: dict[str, NDArray[np.float64]], step: int) -> float:
    """Mean of the embedding and lm_head grad norms over the median middle-layer one."""
    n = run.n_layers
    middle = [metrics[f"grad/norm/layers.{i}"][step] for i in range(n // 4, 3 * n // 4)]
    ends = (metrics["grad/norm/embed"][step] + metrics["grad/norm/lm_head"][step]) / 2
    return float(ends / np.median(middle))


def test_per_layer_grad_norms_form_a_u_that_steepens(simulated: Block) -> None:
    run, _, metrics = simulated
    late = np.median([u_ratio(run, metrics, s) for s in range(70_000, 80_000, 10)])
    early = np.median([u_ratio(run, metrics, s) for s in range(9_000, 11_000, 10)])
    assert 3.0 <= late <= 10.0
    assert 3.0 <= early < late
    layers = np.array([metrics[f"grad/norm/layers.{i}"][75_000] for i in range(run.n_layers)])
    middle = np.median(layers[run.n_layers // 4 : 3 * run.n_layers // 4])
    assert layers[0] > 2 * middle and layers[-1] > 1.5 * middle


def test_loss_falls_while_grad_and_param_norms_grow(simulated: Block) -> None:
    _, _, metrics = simulated
    loss, grad_norm = metrics["train/loss"], metrics["grad/norm/total"]
    params = metrics["params/norm/total"]
    assert loss[0] > 10.0
    for early, late in [(slice(20_000, 30_000), slice(70_000, 80_000))]:
        assert np.median(loss[late]) < np.median(loss[early])
        assert np.median(grad_norm[late]) > np.median(grad_norm[early])
        assert np.median(params[late]) > np.median(params[early])
    assert np.median(loss[90_000:91_000]) < np.median(loss[80_000:81_000])


def onset(values: NDArray[np.float64], start: int, stop: int, rise: float, *, ratio: bool) -> int:
    """First step in ``[start, stop)`` where ``values`` exceed the median of the 100 steps
    before ``start`` by ``rise`` (a factor when ``ratio``, else an offset); -1 if none."""
    baseline = float(np.median(values[start - 100 : start]))
    window = values[start:stop]
    above = window > baseline * rise if ratio else window > baseline + rise
    return start + int(np.argmax(above)) if above.any() else -1


def test_update_norm_spikes_lead_loss_and_grad_norm_spikes(simulated: Block) -> None:
    run, _, metrics = simulated
    updates, loss = metrics["updates/norm/total"], metrics["train/loss"]
    grad_norm = metrics["grad/norm/total"]
    with_loss = [s for s in run.spikes if s.loss_step is not None]
    without_loss = [s for s in run.spikes if s.loss_step is None]
    assert len(with_loss) >= 3 and len(without_loss) >= 1

    for spike in run.spikes:
        start = spike.update_step - 30
        update_at = onset(updates, start, start + 60, 1.6, ratio=True)
        loss_at = onset(loss, start, start + 60, 0.2, ratio=False)
        grad_at = onset(grad_norm, start, start + 60, 1.6, ratio=True)
        assert update_at == spike.update_step
        assert updates[update_at] / np.median(updates[start - 100 : start]) == pytest.approx(
            2.0, abs=0.5
        )
        if spike.loss_step is None:
            assert loss_at == -1 and grad_at == -1
        else:
            assert 3 <= loss_at - update_at <= 10
            assert 3 <= grad_at - update_at <= 10


def test_update_spikes_are_larger_in_lower_layers_and_double_the_first_moment() -> None:
    run = SimulatedRun(seed=0)
    spike = run.spikes[0]
    steps, metrics = run.block(spike.update_step - 200, spike.update_step + 1)
    before = slice(0, 100)

    def jump(name: str) -> float:
        values = metrics[name]
        return float(values[-1] / np.median(values[before]))

    assert jump("updates/norm/layers.0") > jump(f"updates/norm/layers.{run.n_layers - 1}") + 0.5
    assert jump("updates/norm/embed") > jump("updates/norm/lm_head") + 0.5
    quarter = run.n_layers // 4
    bottom = np.mean([jump(f"updates/norm/layers.{i}") for i in range(quarter)])
    top = np.mean(
        [jump(f"updates/norm/layers.{i}") for i in range(run.n_layers - quarter, run.n_layers)]
    )
    assert bottom > top + 0.3
    first_moment = metrics["optim/mu/norm/total"]
    assert first_moment[-1] / np.median(first_moment[before]) == pytest.approx(2.0, abs=0.3)
    second_moment = metrics["optim/nu/norm/total"]
    assert second_moment[-1] / np.median(second_moment[before]) == pytest.approx(1.0, abs=0.1)


def test_values_depend_only_on_seed_and_step() -> None:
    run = SimulatedRun(seed=3)
    _, whole = run.block(1_000, 3_000, layer_every=5)
    _, part = run.block(2_000, 2_500, layer_every=5)
    for name, values in part.items():
        np.testing.assert_array_equal(values, whole[name][1_000:1_500])
    _, again = SimulatedRun(seed=3).block(2_000, 2_500, layer_every=5)
    np.testing.assert_array_equal(again["train/loss"], part["train/loss"])
    _, other = SimulatedRun(seed=4).block(2_000, 2_500, layer_every=5)
    assert not np.array_equal(other["train/loss"], part["train/loss"])


def test_a_range_cut_in_pieces_gives_the_same_values_as_one_block() -> None:
    run = SimulatedRun(seed=0)
    stop = 20_000
    # One cut falls inside the first spike's window of dense per-part logging.
    inside = run.spikes[0].update_step + 5
    assert 4_097 < inside < 12_345 and inside != 8_193
    _, whole = run.block(0, stop, layer_every=10)
    cuts = sorted([0, 1, 2, 4_095, 4_097, inside, 8_193, 12_345, stop])
    pieces = [run.block(a, b, layer_every=10)[1] for a, b in zip(cuts, cuts[1:], strict=False)]
    for name, values in whole.items():
        joined = np.concatenate([piece[name] for piece in pieces])
        np.testing.assert_array_equal(joined, values, err_msg=name)
    # The totals are the parts' global norm whether or not the parts are logged.
    _, sparse = run.block(0, stop, layer_every=7)
    for family in FAMILIES:
        np.testing.assert_array_equal(sparse[f"{family}/total"], whole[f"{family}/total"])
    step = 12_340
    at = run.metrics_at(step)
    assert all(at[name] == values[step] for name, values in whole.items())


def test_a_restart_lineage_has_fresh_noise_and_no_spikes() -> None:
    run = SimulatedRun(seed=0)
    spike = next(s for s in run.spikes if s.loss_step is not None)
    _, first = run.block(spike.update_step - 100, spike.update_step + 100)
    _, replay = run.block(spike.update_step - 100, spike.update_step + 100, lineage=1)
    assert not np.array_equal(first["train/loss"], replay["train/loss"])
    np.testing.assert_array_equal(
        first["params/norm/final_norm.weight"], replay["params/norm/final_norm.weight"]
    )
    assert replay["updates/norm/total"].max() < 1.3 * np.median(replay["updates/norm/total"])
    steps = np.arange(spike.update_step - 100, spike.update_step + 100)
    assert run.per_layer_logged(steps, layer_every=10)[100:131].all()
    np.testing.assert_array_equal(
        run.per_layer_logged(steps, layer_every=10, lineage=1), steps % 10 == 0
    )


def test_per_layer_metrics_are_logged_every_layer_every_steps() -> None:
    run = SimulatedRun(seed=0, n_layers=8)
    steps, metrics = run.block(95, 125, layer_every=10)
    logged = steps % 10 == 0
    assert set(run.layer_names()) <= set(metrics)
    # Grad, update and parameter norms of embed, 8 layers, final_norm.weight and lm_head;
    # the gain's parameter norm is logged at every step.
    assert len(run.layer_names()) == 3 * (8 + 3) - 1
    assert "params/norm/final_norm.weight" not in run.layer_names()
    for name in run.layer_names():
        assert np.isnan(metrics[name]).tolist() == (~logged).tolist()
    assert not np.isnan(metrics["grad/norm/total"]).any()

    at_100 = run.metrics_at(100)
    assert at_100["grad/norm/layers.7"] == metrics["grad/norm/layers.7"][5]
    assert "grad/norm/layers.0" not in run.metrics_at(100, per_layer=False)
    rows = list(run.iter_steps(95, 125, layer_every=10, chunk=7))
    assert [step for step, _ in rows] == list(range(95, 125))
    assert [len(row) for step, row in rows if step % 10 == 0] == [len(metrics)] * 3
    assert rows[0][1]["train/loss"] == metrics["train/loss"][0]


def test_events_mark_the_config_change() -> None:
    assert (EVENT, "config", "near-dropless EP routing") in SimulatedRun().events()


def test_invalid_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="layer_every"):
        SimulatedRun().block(0, 10, layer_every=0)
    with pytest.raises(ValueError, match="start"):
        SimulatedRun().block(10, 0)


def test_generating_a_long_run_is_fast() -> None:
    run = SimulatedRun(seed=0)
    run.block(0, 1_000, layer_every=10)
    started = time.perf_counter()
    steps, metrics = run.block(0, STOP, layer_every=10)
    assert time.perf_counter() - started < 2.0
    assert len(steps) == STOP and len(metrics) == 10 + 3 * (run.n_layers + 3) - 1
