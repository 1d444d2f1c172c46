"""Packed norms: `stability_metrics(..., packed=True)` is one output of the jitted step, the
same norms under the same names, logged without a copy or a device read on the training
thread, and delivered as the per-leaf dict would be."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from normwatch.client import PackedMetrics, Run
from normwatch.client.jax import computed_at, stability_metrics
from tests.helpers.ingest import IngestRecorder

RTOL = 1e-6


def model(layers: int = 4, leaves: int = 3) -> dict[str, object]:
    """A stack of ``layers`` layers of ``leaves`` leaves, plus an embedding."""
    rng = np.random.default_rng(0)
    stacked = {f"w{i}": jnp.asarray(rng.normal(size=(layers, 8, 4))) for i in range(leaves)}
    return {"embed": jnp.asarray(rng.normal(size=(16, 4))), "layers": stacked}


def test_packed_holds_the_dicts_norms_under_the_same_names() -> None:
    params, grads = model(), model()
    as_dict = stability_metrics(grads, params)
    packed = stability_metrics(grads, params, packed=True)
    assert isinstance(packed, PackedMetrics)
    assert list(packed) == list(as_dict) and len(packed) == len(as_dict)
    assert packed.totals == 2 and packed.names[:2] == ("grad/norm/total", "params/norm/total")
    for name, value in packed.items():
        np.testing.assert_allclose(value, float(as_dict[name]), rtol=RTOL, err_msg=name)
    assert packed["grad/norm/layers.2.w1"] == pytest.approx(float(as_dict["grad/norm/layers.2.w1"]))
    with pytest.raises(KeyError):
        packed["no/such"]


def test_packed_is_one_output_of_a_jitted_step() -> None:
    params = model(layers=12, leaves=10)

    @jax.jit
    def step(p: object, scale: jax.Array) -> tuple[jax.Array, PackedMetrics]:
        grads = jax.tree.map(lambda x: x * scale, p)
        return scale * 2.0, stability_metrics(grads, p, packed=True)

    loss, packed = step(params, jnp.float32(0.5))
    outputs = jax.tree_util.tree_leaves((loss, packed))
    assert len(outputs) == 2  # the loss and one vector, for 12 x 10 leaves
    assert packed.vector.shape == (len(packed.names),) and len(packed.names) > 250
    jaxpr_outputs = jax.make_jaxpr(step)(params, jnp.float32(0.5)).out_avals
    assert len(jaxpr_outputs) == 2
    expected = stability_metrics(jax.tree.map(lambda x: x * 0.5, params), params)
    assert dict(packed.items()) == pytest.approx({k: float(v) for k, v in expected.items()})


def test_every_and_computed_at_keep_the_totals_of_a_packed_vector() -> None:
    params = model()

    @jax.jit
    def step(s: jax.Array) -> PackedMetrics:
        return stability_metrics(params, params, every=3, step=s, packed=True)

    on, off = step(jnp.int32(3)), step(jnp.int32(4))
    assert computed_at(on, step=3, every=3) is on
    kept = computed_at(off, step=4, every=3)
    assert list(kept) == ["grad/norm/total", "params/norm/total"]
    assert all(not math.isnan(v) for _, v in kept.items())
    assert any(math.isnan(v) for _, v in off.items())  # the placeholders it leaves out


def test_log_queues_a_packed_vector_as_it_is_and_delivers_every_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NORMWATCH_SPOOL_DIR", str(tmp_path))
    weights = jnp.full((256, 256), 1e-3)

    @jax.jit
    def slow_step(w: jax.Array) -> PackedMetrics:
        y = jax.lax.fori_loop(0, 300, lambda i, y: jnp.tanh(y @ w + 1e-3), w)
        return stability_metrics({"layers": {"w": y.reshape(4, 64, 256)}}, {"w": w}, packed=True)

    jax.block_until_ready(slow_step(weights).vector)  # compile first
    recorder = IngestRecorder()
    run = Run(
        "http://normwatch.test",
        token="nw_test",
        name="packed",
        flush_interval=0.05,
        transport=httpx.MockTransport(recorder.handle),
    )
    with jax.transfer_guard_device_to_host("disallow_explicit"):
        packed = slow_step(weights)
        run.log(packed, step=7)
        run.log({"train/loss": 2.5}, step=7)  # merged with the vector's names at step 7
        assert not packed.vector.is_ready()  # nothing waited for the step
    run.finish(timeout=10.0)
    expected = {(7, name): value for name, value in packed.items()}
    assert {k: v for k, v in recorder.points.items() if k[1] != "train/loss"} == pytest.approx(
        expected, rel=1e-7
    )
    assert recorder.points[(7, "train/loss")] == 2.5
    assert run.pending_points == 0 and run.dropped_points == 0


def test_a_packed_vector_from_the_host_is_logged_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NORMWATCH_SPOOL_DIR", str(tmp_path))
    recorder = IngestRecorder()
    run = Run(
        "http://normwatch.test",
        token="nw_test",
        name="host-packed",
        flush_interval=0.05,
        transport=httpx.MockTransport(recorder.handle),
    )
    values = np.array([1.5, float("nan"), 3.0])
    run.log(PackedMetrics(["a", "b", "c"], values, count=3), step=1)
    run.log(PackedMetrics(["a", "b", "c"], values, count=1), step=2)
    run.finish(timeout=10.0)
    assert recorder.points == {(1, "a"): 1.5, (1, "b"): "NaN", (1, "c"): 3.0, (2, "a"): 1.5}
