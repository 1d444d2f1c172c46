"""`normwatch.client.jax` against a NumPy float64 reference, optax, and a live `Run`."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from normwatch.client import Run
from normwatch.client.jax import (
    PER_LEAF_FAMILIES,
    computed_at,
    is_logging_process,
    stability_metrics,
)
from normwatch.testing import ServerProcess
from tests.helpers.docs_figures import docs_figures
from tests.helpers.ingest import IngestRecorder
from tests.helpers.jax_norms import (
    RTOL,
    assert_norms_match,
    find_adam,
    random_like,
    reference_norms,
    to_numpy,
)
from tests.helpers.tenants import make_tenant

ROOT = Path(__file__).resolve().parents[2]

# --- trees -------------------------------------------------------------------------------------


class Block(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Dense(16, name="w1")(nn.LayerNorm(name="norm")(x))
        return x + nn.Dense(8, name="w2")(nn.gelu(h))


class ListModel(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(8, name="embed")(x)
        for _ in range(3):
            x = Block()(x)  # auto-named Block_0..2: no layer structure
        return nn.Dense(2, name="lm_head")(x)


class LayersListModel(nn.Module):
    def setup(self) -> None:
        self.embed = nn.Dense(8)
        self.layers = [Block() for _ in range(3)]  # Flax names these layers_0..layers_2

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.embed(x)
        for block in self.layers:
            x = block(x)
        return x


class ScanBlock(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
        return Block()(x), None


class ScannedModel(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(8, name="embed")(x)
        scan = nn.scan(
            ScanBlock, variable_axes={"params": 0}, split_rngs={"params": True}, length=4
        )
        x, _ = scan(name="layers")(x, None)
        return nn.RMSNorm(name="final_norm")(x)


def flax_params(module: nn.Module) -> Any:
    return module.init(jax.random.key(0), jnp.ones((2, 4)))


TREES: dict[str, Callable[[], Any]] = {
    "nested dicts": lambda: random_like(
        {"embed": (50, 8), "block": {"attn": {"wq": (8, 8), "b": (8,)}, "mlp": {"w1": (8, 32)}}},
        seed=1,
    ),
    "lists and tuples": lambda: random_like(
        {"layers": [{"w": (4, 4)}, {"w": (4, 4), "b": (4,)}], "head": ((4, 2), (2,))}, seed=2
    ),
    "flax module": lambda: flax_params(ListModel()),
    "flax layers_N list": lambda: flax_params(LayersListModel()),
    "scanned layers": lambda: flax_params(ScannedModel()),
    "stacked dict leaf": lambda: random_like({"layers": {"w": (6, 3, 5)}, "out": (5,)}, seed=3),
    "bfloat16": lambda: random_like({"layers": {"w": (3, 64, 64)}, "e": (256,)}, 4, jnp.bfloat16),
    "float16": lambda: random_like({"w": (128, 128), "b": (128,)}, seed=5, dtype=jnp.float16),
}


# --- norms -------------------------------------------------------------------------------------


@pytest.mark.parametrize("tree_name", TREES)
def test_norms_match_optax_and_a_float64_reference(tree_name: str) -> None:
    params = TREES[tree_name]()
    grads = jax.tree_util.tree_map(lambda x: (x * 0.5 + 0.25).astype(x.dtype), params)
    metrics = jax.jit(stability_metrics)(grads, params)

    upcast = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), grads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # its successor is optax.tree.norm
        global_norm = float(optax.global_norm(upcast))
    for total in (global_norm, float(optax.tree.norm(upcast))):
        np.testing.assert_allclose(float(metrics["grad/norm/total"]), total, rtol=RTOL)
    expected = reference_norms(to_numpy(grads), "grad/norm/")
    expected |= reference_norms(to_numpy(params), "params/norm/")
    assert_norms_match(metrics, expected)
    assert set(metrics) == set(expected)
    assert all(value.dtype == jnp.float32 and value.shape == () for value in metrics.values())


def test_low_precision_leaves_are_accumulated_in_float32() -> None:
    # 4096 squares of 1.0 sum to 4096 in float32, but a bfloat16 sum stalls at 256 or so.
    grads = {"w": jnp.ones((4096,), jnp.bfloat16)}
    metrics = stability_metrics(grads, grads)
    assert float(metrics["grad/norm/total"]) == 64.0


@pytest.mark.parametrize(
    ("tree_name", "names"),
    [
        ("nested dicts", ["embed", "block.attn.wq", "block.attn.b", "block.mlp.w1"]),
        ("lists and tuples", ["layers.0.w", "layers.0", "layers.1.w", "layers.1.b", "layers.1"]),
        ("flax module", ["Block_0.norm.scale", "Block_2.w2.kernel", "embed.kernel"]),
        ("flax layers_N list", ["layers.0.w1.kernel", "layers.2", "embed.bias"]),
        ("scanned layers", ["layers.3.Block_0.w1.kernel", "layers.0", "final_norm.scale"]),
    ],
)
def test_names_are_key_paths_joined_with_dots(tree_name: str, names: list[str]) -> None:
    params = TREES[tree_name]()
    metrics = stability_metrics(params, params)
    assert {f"params/norm/{name}" for name in names} <= set(metrics)
    assert not any(name.startswith("params/norm/params.") for name in metrics)


def test_nnx_state_paths_drop_the_variable_value() -> None:
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Linear(3, 4, rngs=rngs)
            self.final_norm = nnx.RMSNorm(4, rngs=rngs)

    state = nnx.state(Model(nnx.Rngs(0)), nnx.Param)
    metrics = stability_metrics(state, state)
    assert sorted(name for name in metrics if name.startswith("grad/")) == [
        "grad/norm/embed.bias",
        "grad/norm/embed.kernel",
        "grad/norm/final_norm.scale",
        "grad/norm/total",
    ]
    kernel = np.asarray(state["embed"]["kernel"].get_value(), np.float64)
    np.testing.assert_allclose(
        float(metrics["grad/norm/embed.kernel"]), np.sqrt(np.sum(kernel**2)), rtol=RTOL
    )


def test_a_stacked_leaf_gives_the_norms_of_the_same_layers_kept_apart() -> None:
    per_layer = [random_like({"attn": {"wq": (8, 8)}, "mlp": {"w1": (8, 16)}}, i) for i in range(5)]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *per_layer)
    from_stack = stability_metrics({"layers": stacked}, {"layers": stacked})
    from_list = stability_metrics({"layers": per_layer}, {"layers": per_layer})
    assert sorted(from_stack) == sorted(from_list)
    assert "grad/norm/layers.4.mlp.w1" in from_stack and "grad/norm/layers.4" in from_stack
    for name, value in from_list.items():
        np.testing.assert_allclose(float(from_stack[name]), float(value), rtol=RTOL, err_msg=name)


@pytest.mark.parametrize(
    ("layer_axes", "shape", "n_layers", "layer_of"),
    [
        ({"decoder": 1}, (5, 3, 4), 3, lambda x, i: x[:, i]),  # scanned on axis 1
        ({"decoder": -1}, (5, 4, 3), 3, lambda x, i: x[..., i]),
        ({"decoder": (0, 1)}, (2, 3, 4), 6, lambda x, i: x[i // 3, i % 3]),  # remat_scan (2, 3)
        ({"decoder": (1, 0)}, (3, 2, 4), 6, lambda x, i: x[i % 3, i // 3]),
    ],
)
def test_layer_axes_chooses_the_axes_that_index_layers(
    layer_axes: dict[str, Any],
    shape: tuple[int, ...],
    n_layers: int,
    layer_of: Callable[[np.ndarray, int], np.ndarray],
) -> None:
    weight = np.asarray(random_like({"w": shape}, seed=7)["w"], np.float64)
    tree = {"decoder": {"w": jnp.asarray(weight, jnp.float32)}, "layers": {"x": jnp.ones(3)}}
    metrics = stability_metrics(tree, tree, layer_axes=layer_axes)

    split = [name for name in metrics if name.startswith("grad/norm/decoder.")]
    assert split == [
        name
        for i in range(n_layers)
        for name in (f"grad/norm/decoder.{i}.w", f"grad/norm/decoder.{i}")
    ]
    for i in range(n_layers):
        expected = np.sqrt(np.sum(layer_of(weight, i) ** 2))
        np.testing.assert_allclose(float(metrics[f"grad/norm/decoder.{i}.w"]), expected, rtol=RTOL)
    # "layers" is not a layer key here, so its leaf stays whole.
    assert "grad/norm/layers.x" in metrics


def test_per_leaf_false_keeps_the_totals_and_the_per_layer_norms() -> None:
    params = TREES["scanned layers"]()
    opt_state = optax.adamw(1e-3).init(params)
    full = stability_metrics(params, params, params, opt_state, moments_per_leaf=True)
    metrics = stability_metrics(params, params, params, opt_state, per_leaf=False)
    families = ("grad", "params", "updates")
    assert sorted(metrics) == sorted(
        [f"{family}/norm/total" for family in (*families, "optim/mu", "optim/nu")]
        + [f"{family}/norm/layers.{i}" for family in families for i in range(4)]
    )
    for name, value in metrics.items():
        np.testing.assert_allclose(float(value), float(full[name]), rtol=RTOL, err_msg=name)
    with_moments = stability_metrics(
        params, params, None, opt_state, per_leaf=False, moments_per_leaf=True
    )
    assert "optim/nu/norm/layers.3" in with_moments
    assert "optim/nu/norm/layers.3.Block_0.w1.kernel" not in with_moments


def test_bad_layer_axes_are_refused_with_the_fix() -> None:
    tree = {"layers": {"scale": jnp.ones(())}}
    with pytest.raises(ValueError, match=r"fix layer_axes\['layers'\] \(None: not stacked\)"):
        stability_metrics(tree, tree, layer_axes={"layers": 0})
    matrix = {"layers": {"w": jnp.ones((2, 3))}}
    with pytest.raises(ValueError, match=r"along axes \(0, -2\); fix layer_axes"):
        stability_metrics(matrix, matrix, layer_axes={"layers": (0, -2)})  # the same axis twice
    for bad in ("0", True, ()):
        with pytest.raises(ValueError, match="an axis, a tuple of axes, or None"):
            stability_metrics(tree, tree, layer_axes={"layers": bad})  # type: ignore[dict-item]
    assert "grad/norm/layers.scale" in stability_metrics(tree, tree, layer_axes={})
    # The default only guesses: a scalar has no layer axis, so it is not a stack.
    assert "grad/norm/layers.scale" in stability_metrics(tree, tree)


def test_non_float_leaves_are_left_out() -> None:
    grads = {"w": jnp.ones(4), "count": jnp.array(3), "mask": np.zeros(2, jax.dtypes.float0)}
    metrics = stability_metrics(grads, {"w": jnp.ones(4)})
    assert sorted(metrics) == [
        "grad/norm/total",
        "grad/norm/w",
        "params/norm/total",
        "params/norm/w",
    ]
    assert float(metrics["grad/norm/total"]) == 2.0


def test_updates_are_reported_when_given() -> None:
    params = TREES["scanned layers"]()
    updates = jax.tree_util.tree_map(lambda x: -1e-3 * x, params)
    metrics = stability_metrics(params, params, updates)
    assert_norms_match(metrics, reference_norms(to_numpy(updates), "updates/norm/"))


# --- Adam moments ------------------------------------------------------------------------------


OPTIMIZERS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "chain(clip, adamw)": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2)),
    "inject_hyperparams(adamw)": lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2),
    "MultiSteps(adam)": lambda: optax.MultiSteps(optax.adam(1e-2), every_k_schedule=1),
}


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_adam_moments_are_found_inside_wrapped_optimizers(optimizer: str) -> None:
    params = TREES["nested dicts"]()
    tx = OPTIMIZERS[optimizer]()
    state = tx.init(params)
    grads = params
    for _ in range(2):
        updates, state = tx.update(grads, state, params)
    adam = find_adam(state)
    assert adam is not None

    metrics = jax.jit(lambda g, p, u, s: stability_metrics(g, p, u, s, moments_per_leaf=True))(
        grads, params, updates, state
    )

    expected = reference_norms(to_numpy(adam.mu), "optim/mu/norm/")
    expected |= reference_norms(to_numpy(adam.nu), "optim/nu/norm/")
    assert_norms_match(metrics, expected)
    assert float(metrics["optim/mu/norm/total"]) > 0


def test_moment_totals_only_by_default_and_nothing_without_adam() -> None:
    params = TREES["nested dicts"]()
    adam_state = optax.adamw(1e-3).init(params)
    names = set(stability_metrics(params, params, params, adam_state))
    assert {name for name in names if name.startswith("optim/")} == {
        "optim/mu/norm/total",
        "optim/nu/norm/total",
    }
    sgd_state = optax.sgd(1e-3, momentum=0.9).init(params)
    assert not any(
        name.startswith("optim/") for name in stability_metrics(params, params, None, sgd_state)
    )


# --- every ------------------------------------------------------------------------------------


def test_every_computes_per_leaf_norms_only_on_multiples_of_every_under_jit() -> None:
    params = TREES["scanned layers"]()

    @jax.jit
    def step_fn(step: jax.Array) -> dict[str, jax.Array]:
        return {"train/loss": step * 1.0, **stability_metrics(params, params, every=3, step=step)}

    jaxpr = str(jax.make_jaxpr(step_fn)(jnp.int32(0)))
    assert "cond[" in jaxpr
    full = stability_metrics(params, params)
    for step in range(7):
        metrics = step_fn(jnp.int32(step))
        assert sorted(metrics) == sorted(["train/loss", *full])
        for name, value in full.items():
            due = step % 3 == 0 or name.endswith("/total")
            got = float(metrics[name])
            if due:
                np.testing.assert_allclose(got, float(value), rtol=RTOL, err_msg=name)
            else:
                assert math.isnan(got), name
        logged = computed_at(metrics, step=step, every=3)
        assert all(not math.isnan(float(value)) for value in logged.values())
        if step % 3 == 0:
            assert logged is metrics
        else:
            assert sorted(logged) == sorted(["train/loss", "grad/norm/total", "params/norm/total"])


def test_computed_at_keeps_other_metrics_and_families_totals() -> None:
    metrics = {"train/loss": 1.0, "optim/lr": 2.0, "grad/norm/layers.0.w": 3.0}
    for family in PER_LEAF_FAMILIES:
        metrics |= {f"{family}total": 4.0, f"{family}layers.0": 5.0, f"{family}embed": 6.0}
    off_step = computed_at(metrics, step=5, every=10)
    assert sorted(off_step) == sorted(
        ["train/loss", "optim/lr", *(f"{family}total" for family in PER_LEAF_FAMILIES)]
    )
    assert computed_at(metrics, step=20, every=10) is metrics


def test_every_needs_a_step_and_a_positive_int() -> None:
    tree = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="pass step="):
        stability_metrics(tree, tree, every=10)
    for every in (0, -1, 1.5):
        with pytest.raises(ValueError, match="every must be an int >= 1"):
            stability_metrics(tree, tree, every=every, step=0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="every must be an int >= 1"):
            computed_at({}, step=0, every=every)  # type: ignore[arg-type]


def test_is_logging_process_on_a_single_process() -> None:
    assert is_logging_process() is (jax.process_index() == 0) is True


def test_the_client_imports_without_jax() -> None:
    code = (
        "import sys; sys.modules['jax'] = None\n"
        "import normwatch.client\n"
        "try:\n    import normwatch.client.jax\nexcept ImportError:\n    print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout == "ok\n", result.stderr


def test_docstring_examples_run() -> None:
    import doctest

    import normwatch.client.jax as module

    assert doctest.testmod(module, raise_on_error=False).failed == 0


# --- logging device scalars ----------------------------------------------------------------------


class JaxCallAudit:
    """Records the JAX functions called on *this* thread while active.

    Catches reads that go through JAX's Python code (``float()``, ``.item()``,
    ``jax.device_get``, ``copy_to_host_async``), even of values that are already computed.
    NumPy's ``np.asarray(array)`` reaches the C++ buffer directly and is not seen here; the
    ``is_ready`` check catches that one. ``sys.setprofile`` hooks only the calling thread,
    so the conversions on the client's background threads are not recorded.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._roots = tuple(str(Path(module.__file__).parent) for module in (jax, jax.lib))

    def _hook(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(self._roots):
            self.calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        elif event == "c_call":
            module = (
                getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
            )
            if module.startswith(("jax", "jaxlib")):
                self.calls.append(repr(arg))

    def __enter__(self) -> JaxCallAudit:
        self._previous = sys.getprofile()
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._previous)


def test_log_takes_device_scalars_without_reading_them_on_the_training_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NORMWATCH_SPOOL_DIR", str(tmp_path))
    weights = jnp.full((512, 512), 1e-3)

    @jax.jit
    def slow_step(w: jax.Array) -> dict[str, jax.Array]:
        # About a quarter of a second of work, so the values are not ready for a while.
        y = jax.lax.fori_loop(0, 200, lambda i, y: jnp.tanh(y @ w + 1e-3), w)
        return stability_metrics({"layers": {"w": y.reshape(4, 128, 512)}}, {"w": w})

    jax.block_until_ready(slow_step(weights))  # compile first
    recorder = IngestRecorder()
    run = Run(
        "http://normwatch.test",
        token="nw_test",
        name="no-sync",
        flush_interval=0.05,
        transport=httpx.MockTransport(recorder.handle),
    )
    seen_by_other_thread: list[object] = []
    with jax.transfer_guard_device_to_host("disallow_explicit"):
        metrics = slow_step(weights)
        with JaxCallAudit() as audit:
            run.log(metrics, step=7)
        # Any read of a value, by whatever path, would have waited for the step to finish.
        assert not any(value.is_ready() for value in metrics.values())
        assert audit.calls == []

        # The guard is per thread: the client's background threads do not run under it.
        assert jax.config.jax_transfer_guard_device_to_host == "disallow_explicit"
        thread = threading.Thread(
            target=lambda: seen_by_other_thread.append(jax.config.jax_transfer_guard_device_to_host)
        )
        thread.start()
        thread.join()

        # The checks catch a read: the audit sees it, and the value had to be waited for.
        with JaxCallAudit() as audit:
            read = float(metrics["grad/norm/total"])
        assert any("__float__" in call for call in audit.calls)
        assert metrics["grad/norm/total"].is_ready()
        if jax.default_backend() != "cpu":
            # On an accelerator the guard itself refuses a read; CPU arrays live in host
            # memory, so there it has nothing to refuse and the checks above are the proof.
            with pytest.raises(jax.errors.JaxRuntimeError, match="device-to-host"):
                float(slow_step(weights)["grad/norm/total"])
    assert seen_by_other_thread == [None]
    run.finish(timeout=10.0)

    expected = {(7, name): float(value) for name, value in metrics.items()}
    assert recorder.points == pytest.approx(expected, rel=1e-7)
    assert recorder.points[(7, "grad/norm/total")] == pytest.approx(read, rel=1e-7)
    assert {"grad/norm/layers.3.w", "grad/norm/layers.3", "params/norm/w"} <= {
        name for _, name in recorder.points
    }


# --- the example, end to end -------------------------------------------------------------------


@pytest.mark.slow
def test_example_streams_per_layer_metrics_to_a_real_server(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    tenant = make_tenant(sqlite_server.database_url)
    command = [
        sys.executable,
        "-W",
        "error",
        str(ROOT / "examples" / "train_lm.py"),
        *("--url", sqlite_server.url, "--token", tenant.ingest, "--project", tenant.project),
        *("--name", "char-lm", "--steps", "30", "--layers", "2", "--every", "5"),
    ]
    environment = {**os.environ, "JAX_PLATFORMS": "cpu", "NORMWATCH_SPOOL_DIR": str(tmp_path)}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=240, env=environment, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sent " in result.stdout

    with httpx.Client(
        base_url=sqlite_server.url, headers=tenant.headers("read"), timeout=30
    ) as api:
        (run,) = api.get("/api/v1/runs", params={"project": tenant.project}).json()
        assert (run["name"], run["status"], run["last_step"]) == ("char-lm", "finished", 29)
        names = {metric["name"] for metric in api.get(f"/api/v1/runs/{run['id']}/metrics").json()}
        wanted = ["grad/norm/total", "grad/norm/layers.1", "updates/norm/layers.0"]
        series = api.get(
            f"/api/v1/runs/{run['id']}/series",
            params={"metric": [*wanted, "grad/norm/layers.1.mlp.w1.kernel"], "points": 100},
        ).json()["series"]
    assert {
        "train/loss",
        "optim/lr",
        "grad/norm/total",
        "grad/norm/layers.0",
        "grad/norm/layers.1.attn.query.kernel",
        "params/norm/final_norm.scale",
        "params/norm/lm_head.kernel",
        "updates/norm/total",
        "optim/mu/norm/total",
        "optim/nu/norm/total",
    } <= names
    total, *per_layer = series
    assert total["steps"] == list(range(30))
    assert all(isinstance(value, float) and value > 0 for value in total["values"])
    for layer_series in per_layer:
        assert layer_series["steps"] == [0, 5, 10, 15, 20, 25], layer_series["metric"]
        assert all(isinstance(value, float) for value in layer_series["values"])


@pytest.mark.slow
def test_the_unstable_example_shows_update_norm_spikes_leading_loss_spikes(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    """``--unstable`` trains into the momentum pattern of a large run's loss spikes, read
    through the spikes API as a user would: update-norm spikes first (Adam's first moment up,
    its second flat), loss and grad-norm spikes after them, and a leader with no follower."""
    tenant = make_tenant(sqlite_server.database_url)
    command = [
        sys.executable,
        str(ROOT / "examples" / "train_lm.py"),
        *("--url", sqlite_server.url, "--token", tenant.ingest, "--project", tenant.project),
        *("--name", "unstable", "--unstable", "--steps", "500"),
        *("--layers", "2", "--d-model", "64", "--batch-size", "64", "--every", "10"),
    ]
    environment = {**os.environ, "JAX_PLATFORMS": "cpu", "NORMWATCH_SPOOL_DIR": str(tmp_path)}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=environment, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr

    leader, follower, grads = "updates/norm/total", "train/loss", "grad/norm/total"
    with httpx.Client(
        base_url=sqlite_server.url, headers=tenant.headers("read"), timeout=60
    ) as api:
        (run,) = api.get("/api/v1/runs", params={"project": tenant.project}).json()
        report = api.get(
            f"/api/v1/runs/{run['id']}/spikes",
            params={"metric": [leader, follower, grads], "threshold": 4},
        ).json()
    pairs = {(p["leader"], p["follower"]): p for p in report["lead_lag"]}
    led = pairs[leader, follower]
    assert led["matched"] >= 2, report
    assert led["unmatched_leader"] >= 1, report
    assert 5 <= led["lag_steps"] <= 50, report
    assert pairs[leader, grads]["matched"] >= 2, report
    assert pairs[follower, leader]["matched"] == 0, report
    updates = [s for s in report["spikes"] if s["metric"] == leader]
    assert all(s["magnitude"] >= 1.5 for s in updates), updates
    first = [s["moments"]["optim/mu/norm/total"] for s in updates]
    second = [s["moments"]["optim/nu/norm/total"] for s in updates]
    # The first moment doubles or so (the last spike is cut short by the run's end), the
    # second, the gradients' size, stays within a few per cent.
    assert np.median(first) >= 1.5 and min(first) >= 1.3, first
    assert max(abs(ratio - 1) for ratio in second) <= 0.05, second
    # Each loss spike lasts until the loss is back within a noise SD of its trend, recovery
    # included (about 16 % of the steps; 5 % when the end was the first noisy point under).
    assert 0.05 <= report["fraction_in_spikes"][follower] <= 0.25, report["fraction_in_spikes"]

    # What docs/analytics.md quotes of this run is the spikes API's answer at its default.
    with httpx.Client(
        base_url=sqlite_server.url, headers=tenant.headers("read"), timeout=60
    ) as api:
        default = api.get(
            f"/api/v1/runs/{run['id']}/spikes", params={"metric": [leader, follower, grads]}
        ).json()
    docs = docs_figures()
    figures = docs.train_lm_figures(default)
    stale = docs.apply(figures, write=False, passages=docs.EXAMPLE_PASSAGES)
    assert stale == [], "\n".join([*stale, f"measured: {figures}"])
