"""The hierarchy rule on the real output of `stability_metrics` for a Flax model whose
blocks are stacked with ``nn.scan``: the client logs each layer's norm and the norms of its
leaves, and attribution, the layer grid and ``rss()`` count each layer once.

A few real training steps of the model (SGD on random data) are logged through the
services on both backends, then read back as the API and the dashboard read them."""

from __future__ import annotations

import math
from collections.abc import Iterator

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normwatch.client.jax import stability_metrics
from normwatch.server.analytics.hierarchy import outermost
from normwatch.server.db import session_scope
from normwatch.server.services import query
from normwatch.server.services.attribution import attribution
from normwatch.server.services.layers import layer_grid
from tests.helpers.committed import Sessions, new_run, post, the_run
from tests.helpers.databases import BACKENDS, own_sessions

LAYERS = 4
STEPS = 12


class Block(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
        h = nn.Dense(16, name="w1")(nn.LayerNorm(name="norm")(x))
        return x + nn.Dense(8, name="w2")(nn.gelu(h)), None


class Model(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(8, name="embed")(x)
        blocks = nn.scan(
            Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=LAYERS
        )
        x, _ = blocks(name="layers")(x, None)
        return nn.Dense(3, name="lm_head")(nn.RMSNorm(name="final_norm")(x))


def trained_metrics() -> list[dict[str, float]]:
    """`stability_metrics` of each of `STEPS` real SGD steps, as a trainer logs them."""
    model = Model()
    x = jax.random.normal(jax.random.key(1), (16, 4))
    y = jax.random.normal(jax.random.key(2), (16, 3))
    params = model.init(jax.random.key(0), x)
    tx = optax.sgd(0.05)
    state = tx.init(params)

    @jax.jit
    def step(params: object, state: object) -> tuple[object, object, dict[str, jax.Array]]:
        grads = jax.grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
        updates, state = tx.update(grads, state, params)
        metrics = stability_metrics(grads, params, updates, layer_axes={"layers": 0})
        return optax.apply_updates(params, updates), state, metrics

    logged = []
    for _ in range(STEPS):
        params, state, metrics = step(params, state)
        logged.append({k: float(v) for k, v in metrics.items()})
    return logged


@pytest.fixture(scope="module")
def logged() -> list[dict[str, float]]:
    return trained_metrics()


@pytest.fixture(scope="module", params=BACKENDS)
def sessions(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Sessions]:
    with own_sessions(request.param, "hierarchy", tmp_path_factory) as made:
        yield made


@pytest.fixture(scope="module")
def run_id(sessions: Sessions, logged: list[dict[str, float]]) -> str:
    run = new_run(sessions)
    names = list(logged[0])
    post(sessions, run, np.arange(STEPS), **{n: np.array([m[n] for m in logged]) for n in names})
    return run


def test_the_client_logs_layers_and_their_leaves(logged: list[dict[str, float]]) -> None:
    names = set(logged[0])
    assert {f"grad/norm/layers.{i}" for i in range(LAYERS)} <= names
    assert "grad/norm/layers.0.w1.kernel" in names  # a leaf of layer 0
    # The rule's premise, on real numbers: a layer's norm is the root of its leaves' squares.
    leaves = [v for k, v in logged[0].items() if k.startswith("grad/norm/layers.0.")]
    assert math.isclose(
        logged[0]["grad/norm/layers.0"], math.sqrt(sum(v * v for v in leaves)), rel_tol=1e-5
    )


def test_attribution_counts_each_layer_once_and_its_parts_add_up(
    sessions: Sessions, run_id: str
) -> None:
    with session_scope(sessions) as session:
        got = attribution(session, the_run(session, run_id), "grad/norm", by="part")
    assert not any(g.startswith("layers.0.") for g in got.groups)
    assert [g for g in got.groups if g.startswith("layers.")] == [
        f"layers.{i}" for i in range(LAYERS)
    ]
    assert got.mismatched == []
    assert all(s is not None and abs(s - 1) < 1e-4 for s in got.sum), got.sum


def test_the_layer_grid_has_a_row_a_layer(
    sessions: Sessions, run_id: str, logged: list[dict[str, float]]
) -> None:
    with session_scope(sessions) as session:
        grid = layer_grid(session, the_run(session, run_id), "grad/norm")
    assert grid.layers == outermost(grid.layers)
    assert [r for r in grid.layers if r.startswith("layers.")] == [
        f"layers.{i}" for i in range(LAYERS)
    ]
    rows = {layer: values for layer, values in zip(grid.layers, grid.values, strict=True)}
    assert math.isclose(rows["layers.2"][-1], logged[-1]["grad/norm/layers.2"], rel_tol=1e-6)


def test_rss_of_a_glob_over_layers_and_leaves_counts_the_layers(
    sessions: Sessions, run_id: str, logged: list[dict[str, float]]
) -> None:
    with session_scope(sessions) as session:
        (got,) = query.read_series(session, the_run(session, run_id), ["rss(grad/norm/layers.*)"])
    expected = [
        math.sqrt(sum(m[f"grad/norm/layers.{i}"] ** 2 for i in range(LAYERS))) for m in logged
    ]
    np.testing.assert_allclose(got.values, expected, rtol=1e-6)


@pytest.mark.parametrize("family", ["grad/norm", "params/norm", "updates/norm"])
def test_rss_of_a_family_glob_is_its_total_on_the_clients_names(
    sessions: Sessions, run_id: str, logged: list[dict[str, float]], family: str
) -> None:
    """``<family>/*`` meets the client's total, its layers, their leaves and the leaves of
    the embedding, final norm and head: the total gives way and each layer counts once,
    so the rss is the total (to the float32 the client computes in)."""
    with session_scope(sessions) as session:
        (got,) = query.read_series(session, the_run(session, run_id), [f"rss({family}/*)"])
    np.testing.assert_allclose(got.values, [m[f"{family}/total"] for m in logged], rtol=1e-5)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["layers", "0", "1", "12", "attn", "q", "mlp", "w1"]),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([".", "/"]),
)
def test_outermost_keeps_each_part_once(paths: list[list[str]], sep: str) -> None:
    """Brute force: a name is dropped exactly when another name of the set is a proper
    prefix of it ending at a separator; what is kept has no name under another."""
    names = list(dict.fromkeys(sep.join(p) for p in paths))
    kept = outermost(names)
    for name in names:
        parent = any(
            other != name and name.startswith(other) and name[len(other)] in "./" for other in names
        )
        assert (name not in kept) == parent
    assert not any(a != b and b.startswith(a) and b[len(a)] in "./" for a in kept for b in kept)
