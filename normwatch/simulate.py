"""A deterministic, seeded simulation of a large training run, for the demo and tests.

It reproduces each phenomenon normwatch is built to make obvious (see the domain notes):

1. **Norm growth drives grad-norm growth.** `final_norm_gain`: the RMSNorm gain
   ``final_norm.weight`` has no weight decay and grows from sqrt(6144) ≈ 78.4 to ≈ 340 by
   step 80k; a config change at ``event_step`` (81k) steepens its slope, past 360 within a
   few thousand steps. The lm_head gradient scales with that gain, and `routing_surge`
   multiplies every gradient after the change (the lm_head's most), so ``grad/norm/total``
   moves from ≈ 0.3-1 to past 5 some thousands of steps after 81k, and the lm_head's share
   of the squared total grad norm goes from ≈ 0.25 at 1k to ≈ 0.6 at 80k and ≈ 0.85 at 90k.
2. **U-shape across depth.** `depth_profile`: per-layer grad norms are largest at the embedding,
   layer 0 and the lm_head, 3-10x the middle before 81k (more after it, as the lm_head's
   gradient surges), and the U steepens as the end parameters grow. Parameter norms per
   part (`param_norms`) give a parameter-norm heatmap, the ends growing fastest.
3. **Grad norm rising while loss falls.** `loss_curve` falls as a power law throughout while
   ``grad/norm/total`` and ``params/norm/total`` grow together.
4. **Spikes are preceded by update-norm spikes.** `SimulatedRun.spikes`: a handful of ≈2x
   ``updates/norm/*`` spikes (larger in lower layers, the Adam first moment doubling, the
   second flat); most are followed 3-10 steps later by a loss spike with its recovery and a
   grad-norm spike, some by nothing.
5. **Restarts.** ``lineage`` > 0 replays the same trends with fresh noise and without the
   spikes, as after a restart from a checkpoint that skipped the bad batches.

The norms are those of one model, so they add up as real ones do. Each family
``grad/norm``, ``updates/norm`` and ``params/norm`` has one metric per part of the model,
`SimulatedRun.parts`: ``embed``, ``layers.0`` .. ``layers.{L-1}``, ``final_norm.weight`` and
``lm_head``. The parts' norms, noise included, are computed at every step, and

- ``<family>/total`` is ``sqrt(Σ <family>/<part>²)`` over exactly those parts (to float
  rounding), at every step: where the parts are logged it is their root-sum-square, and
  elsewhere the global norm of the parts that were computed but not logged. No part exceeds
  its total.
- The parts are logged (not NaN) on multiples of ``layer_every`` and at every step from
  `DENSE_BEFORE` steps before each spike's update step to `DENSE_AFTER` steps after it, so a
  depth profile at a spike is real. ``params/norm/final_norm.weight`` and the totals are
  logged at every step.

Everything is a pure function of ``(seed, lineage, step)``: noise comes from a counter-based
hash of the step, so any ``block(start, stop)`` gives the same values for the same steps
however the range is cut, and whatever ``layer_every`` is. Generating 120k steps takes a
few tenths of a second.

>>> run = SimulatedRun(seed=0)
>>> steps, metrics = run.block(0, 1000, layer_every=10)
>>> round(float(metrics["params/norm/final_norm.weight"][0]), 1)
78.4
>>> squares = sum(metrics[f"grad/norm/{part}"][500] ** 2 for part in run.parts())
>>> bool(np.isclose(np.sqrt(squares), metrics["grad/norm/total"][500], rtol=1e-12))
True
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from normwatch._simulate_terms import (
    FINAL_NORM_INIT,
    PEAK_LR,
    FloatArray,
    Spike,
    depth_ends,
    depth_profile,
    draw_spikes,
    early_transient,
    final_norm_gain,
    learning_rate,
    loss_curve,
    routing_surge,
    spike_response,
    standard_normal,
    standard_normal_pair,
)

__all__ = [
    "DENSE_AFTER",
    "DENSE_BEFORE",
    "FAMILIES",
    "SimulatedRun",
    "Spike",
    "depth_profile",
    "final_norm_gain",
    "grad_norm_trends",
    "learning_rate",
    "loss_curve",
    "param_norms",
    "routing_surge",
]

FAMILIES = ("grad/norm", "updates/norm", "params/norm")
"""The per-part families; each has a ``total`` that is the root-sum-square of its parts."""
DENSE_BEFORE = 30
"""Steps before a spike's update step from which every step logs the parts."""
DENSE_AFTER = 100
"""Steps after a spike's update step up to which every step logs the parts."""

_CORE = (
    "train/loss",
    "grad/norm/total",
    "params/norm/final_norm.weight",
    "params/norm/total",
    "optim/lr",
    "updates/norm/total",
    "optim/mu/norm/total",
    "optim/nu/norm/total",
    "train/z_loss",
    "throughput/total_tokens",
)
"""Metrics logged at every step, in the order `SimulatedRun.block` returns them."""
TOKENS_PER_STEP = 1024 * 4096
"""Tokens a step trains on (a batch of 1,024 sequences of 4,096): the x axis by tokens."""

# Noise streams: one per core metric, then one per part, drawn as a pair (grad, update).
_STREAM_CORE = 0
_STREAM_PARTS = 1000

_SURGE_EXPONENT_REST = 0.72
"""The routing surge multiplies the lm_head's gradient by ``s`` and the others' by
``s^0.72``: the change reaches the output layer most, so its share of the total rises."""
_GRAD_NOISE = 0.05
"""Log-normal noise per part; as much again is common to every part (the batch)."""
_UPDATE_NOISE = 0.04
_CHUNK = 4096
"""Steps computed at a time: the ``(3 × parts, chunk)`` arrays stay in cache."""


# -- the parts' norms: rows in `SimulatedRun.parts` order ------------------------------------


def grad_norm_trends(t: FloatArray, gain: FloatArray, event_step: int, n_layers: int) -> FloatArray:
    """Noise- and spike-free grad norms per part, shape ``(n_layers + 3, len(t))``.

    With ``r = gain / 78.4``, ``w = 1 - exp(-t / 40k)``, ``e`` = `early_transient` and ``s`` =
    `routing_surge`:

    - ``embed``: ``0.07 (1 + 1.2 w) e s^0.72``;
    - ``layers.i``: ``0.04 (1 + 0.7 w) (1 + a d_i) e s^0.72`` (`depth_profile`: ``d_i`` =
      `depth_ends`, steepness ``a = 1 + 0.45 (r - 1)``, so the U steepens as the gain grows);
    - ``final_norm.weight``: ``0.02 (1 + w) e s^0.72``;
    - ``lm_head``: ``0.165 r e s``: its input feature ``x/rms(x) · gain`` scales with the gain.
    """
    ratio = gain / FINAL_NORM_INIT
    transient = early_transient(t)
    surge = routing_surge(t, event_step)
    rest = transient * surge**_SURGE_EXPONENT_REST
    slow = -np.expm1(-t / 40_000.0)
    grads = np.empty((n_layers + 3, len(t)))
    grads[0] = 0.07 * (1.0 + 1.2 * slow) * rest
    middle = 0.04 * (1.0 + 0.7 * slow) * rest
    grads[1:-2] = middle * depth_profile(n_layers, 1.0 + 0.45 * (ratio - 1.0))
    grads[-2] = 0.02 * (1.0 + slow) * rest
    grads[-1] = 0.165 * ratio * transient * surge
    return grads


def param_norms(t: FloatArray, gain: FloatArray, n_layers: int) -> FloatArray:
    """Parameter norms per part, shape ``(n_layers + 3, len(t))``; smooth (a step changes a
    parameter norm by about the learning rate).

    With ``v = 1 - exp(-t / 50k)``: ``embed`` and ``lm_head`` ``280 (1 + 1.6 v)`` (the
    unconstrained ends grow most), ``layers.i`` ``210 (1 + 0.9 v) (1 + 0.1 d_i)``
    (`depth_ends`), ``final_norm.weight`` the gain.
    """
    slow = -np.expm1(-t / 50_000.0)
    ends = 280.0 * (1.0 + 1.6 * slow)
    params = np.empty((n_layers + 3, len(t)))
    params[0] = ends
    params[1:-2] = np.outer(210.0 * (1.0 + 0.1 * depth_ends(n_layers)), 1.0 + 0.9 * slow)
    params[-2] = gain
    params[-1] = ends
    return params


def _root_sum_square(parts: FloatArray) -> FloatArray:
    """``sqrt(Σ_rows parts²)`` per column, the rows added one after another.

    A plain ``sum(axis=0)`` adds pairwise when there is a single column, so a step's total
    would depend on how a range is cut.
    """
    squares = np.square(parts)
    total = squares[0].copy()
    for row in squares[1:]:
        total += row
    result: FloatArray = np.sqrt(total)
    return result


# -- the run -------------------------------------------------------------------------------


class SimulatedRun:
    """A 48-layer model's run with a config change at ``event_step``; see the module notes."""

    def __init__(self, seed: int = 0, n_layers: int = 48, event_step: int = 81_000) -> None:
        if n_layers < 4:
            raise ValueError(f"n_layers must be at least 4 to have a middle, got {n_layers}")
        if event_step < 10_000:
            raise ValueError(f"event_step must be >= 10_000 to leave room, got {event_step}")
        self.seed = seed
        self.n_layers = n_layers
        self.event_step = event_step
        self.spikes = draw_spikes(seed, event_step)
        self._parts = ["embed", *(f"layers.{i}" for i in range(n_layers))]
        self._parts += ["final_norm.weight", "lm_head"]

        depth = np.arange(n_layers, dtype=np.float64) / (n_layers - 1)
        # Adam's update norm grows with the square root of a tensor's size: the embedding and
        # lm_head are ~1.7x a layer's parameters, the 6144-vector gain ~1e-5 of them.
        weights = np.concatenate([[1.3], 1.15 - 0.3 * depth, [0.004, 1.3]])
        self._update_weights: FloatArray = weights / np.sqrt(np.sum(weights**2))
        # Update-norm spikes are larger in lower layers (phenomenon 4); normalised so that the
        # total's jump is about the spike's `update_factor`.
        shape = np.concatenate([[1.5], 1.5 - depth, [0.5, 0.5]])
        self._update_spike_shape: FloatArray = shape / np.sum(self._update_weights**2 * shape)

        n_parts = len(self._parts)
        self._part_streams = _STREAM_PARTS + np.arange(n_parts, dtype=np.int64)
        # Rows of a chunk's parts that follow the per-layer schedule: all but the gain's
        # parameter norm, which is a core metric logged at every step.
        every_step = 2 * n_parts + self._parts.index("final_norm.weight")
        self._scheduled_rows = np.delete(np.arange(3 * n_parts), every_step)

    def events(self) -> list[tuple[int, str, str]]:
        """``(step, kind, text)`` annotations for the charts."""
        return [
            (0, "config", "z-loss 1e-4; no weight decay on final_norm"),
            (self.event_step, "config", "near-dropless EP routing"),
        ]

    def parts(self) -> list[str]:
        """The model's parts, bottom to top: each family has a ``<family>/<part>`` metric."""
        return list(self._parts)

    def layer_names(self) -> list[str]:
        """Per-part metric names logged only on the per-layer schedule, in the order `block`
        returns them: every ``<family>/<part>`` but ``params/norm/final_norm.weight``, which
        is logged at every step."""
        names = [f"{family}/{part}" for family in FAMILIES for part in self._parts]
        names.remove("params/norm/final_norm.weight")
        return names

    def per_layer_logged(
        self, steps: NDArray[np.int64], *, layer_every: int, lineage: int = 0
    ) -> NDArray[np.bool_]:
        """Which of the ascending ``steps`` log the parts: multiples of ``layer_every``, and
        every step in ``[u - DENSE_BEFORE, u + DENSE_AFTER]`` around each spike's update
        step ``u`` (lineage 0 only: later lineages have no spikes)."""
        logged: NDArray[np.bool_] = steps % layer_every == 0
        for spike in self.spikes if lineage == 0 else ():
            begin, end = np.searchsorted(
                steps, [spike.update_step - DENSE_BEFORE, spike.update_step + DENSE_AFTER + 1]
            )
            logged[begin:end] = True
        return logged

    def block(
        self, start: int, stop: int, *, layer_every: int = 1, lineage: int = 0
    ) -> tuple[NDArray[np.int64], dict[str, FloatArray]]:
        """Steps ``start..stop-1`` and every metric over them.

        Per-part metrics (`layer_names`) are NaN where `per_layer_logged` is False.
        """
        if not 0 <= start <= stop:
            raise ValueError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
        if layer_every < 1:
            raise ValueError(f"layer_every must be >= 1, got {layer_every}")
        steps = np.arange(start, stop, dtype=np.int64)
        logged = self.per_layer_logged(steps, layer_every=layer_every, lineage=lineage)
        core = np.empty((len(_CORE), len(steps)))
        per_layer = np.full((len(self._scheduled_rows), len(steps)), np.nan)
        for begin in range(0, len(steps), _CHUNK):
            end = min(begin + _CHUNK, len(steps))
            parts = self._chunk(steps[begin:end], lineage, out=core[:, begin:end])
            columns = np.flatnonzero(logged[begin:end])
            if columns.size:
                per_layer[:, begin + columns] = parts[np.ix_(self._scheduled_rows, columns)]
        metrics = dict(zip(_CORE, core, strict=True))
        metrics.update(zip(self.layer_names(), per_layer, strict=True))
        return steps, metrics

    def _chunk(self, steps: NDArray[np.int64], lineage: int, *, out: FloatArray) -> FloatArray:
        """Writes the `_CORE` metrics over ``steps`` into ``out`` and returns every part's
        grad, update and parameter norm there, shape ``(3 × parts, len(steps))``."""
        t = steps.astype(np.float64)
        response = spike_response(t, self.spikes if lineage == 0 else ())
        noise = standard_normal(
            self.seed, lineage, _STREAM_CORE + np.arange(6, dtype=np.int64), steps
        )
        grad_noise, update_noise = standard_normal_pair(
            self.seed, lineage, self._part_streams, steps
        )
        gain = final_norm_gain(t, self.event_step)
        grad_trends = grad_norm_trends(t, gain, self.event_step, self.n_layers)
        common = response.grad * np.exp(_GRAD_NOISE * noise[1])
        grads = grad_trends * common * np.exp(_GRAD_NOISE * grad_noise)

        lr = learning_rate(t, self.event_step)
        update_total = 3.0 * lr / PEAK_LR * np.exp(0.03 * noise[2])
        spike_shape = 1.0 + np.outer(self._update_spike_shape, response.update)
        updates = np.outer(self._update_weights, update_total) * spike_shape
        updates *= np.exp(_UPDATE_NOISE * update_noise)

        params = param_norms(t, gain, self.n_layers)
        smooth_grad = _root_sum_square(grad_trends)
        logits_scale_sq = 4.0 * (gain / FINAL_NORM_INIT) ** 2
        logits_scale_sq *= routing_surge(t, self.event_step) * early_transient(t)
        out[:] = (
            loss_curve(t) + response.loss + 0.03 * noise[0],
            _root_sum_square(grads),
            gain,
            _root_sum_square(params),
            lr,
            _root_sum_square(updates),
            0.5 * smooth_grad * (1.0 + response.first_moment) * np.exp(0.03 * noise[3]),
            0.02 * smooth_grad**2 * np.exp(0.02 * noise[4]),
            1e-4 * logits_scale_sq * np.exp(0.05 * noise[5]),
            (t + 1.0) * TOKENS_PER_STEP,
        )
        result: FloatArray = np.concatenate([grads, updates, params])
        return result

    def metrics_at(self, step: int, *, per_layer: bool = True) -> dict[str, float]:
        """Every metric at one step (per-part ones only when ``per_layer``)."""
        _, metrics = self.block(step, step + 1)
        layer_names = set(self.layer_names())
        return {
            name: float(values[0])
            for name, values in metrics.items()
            if per_layer or name not in layer_names
        }

    def iter_steps(
        self, start: int, stop: int, *, layer_every: int = 10, lineage: int = 0, chunk: int = 5000
    ) -> Iterator[tuple[int, dict[str, float]]]:
        """``(step, metrics)`` per step, as a trainer would log them: per-part metrics only
        where `per_layer_logged` says so. Computed ``chunk`` steps at a time."""
        for chunk_start in range(start, stop, chunk):
            steps, metrics = self.block(
                chunk_start,
                min(chunk_start + chunk, stop),
                layer_every=layer_every,
                lineage=lineage,
            )
            names = list(metrics)
            columns = np.column_stack([metrics[name] for name in names])
            for step, row in zip(steps.tolist(), columns.tolist(), strict=True):
                yield (
                    step,
                    {name: value for name, value in zip(names, row, strict=True) if value == value},
                )
