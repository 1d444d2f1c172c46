"""A deterministic, seeded simulation of a large training run, for the demo and tests.

It reproduces each phenomenon normwatch is built to make obvious (see the domain notes):

1. **Norm growth drives grad-norm growth.** `final_norm_gain`: the RMSNorm gain
   ``final_norm.weight`` has no weight decay and grows from sqrt(6144) ≈ 78.4 to ≈ 340 by
   step 80k; a config change at ``event_step`` (81k) steepens its slope, past 360 within a
   few thousand steps. The lm_head gradient, which dominates the total, scales with that gain,
   and `routing_surge` multiplies every gradient after the change, so ``grad/norm/total``
   moves from ≈ 0.3-1 to past 5 some thousands of steps after 81k.
2. **U-shape across depth.** `depth_profile`: per-layer grad norms are largest at the embedding,
   layer 0 and the lm_head, 3-10x the middle, and the U steepens as the end parameters grow.
3. **Grad norm rising while loss falls.** `loss_curve` falls as a power law throughout while
   ``grad/norm/total`` and ``params/norm/total`` grow together.
4. **Spikes are preceded by update-norm spikes.** `SimulatedRun.spikes`: a handful of ≈2x
   ``updates/norm/*`` spikes (larger in lower layers, the Adam first moment doubling, the
   second flat); most are followed 3-10 steps later by a loss spike with its recovery and a
   grad-norm spike, some by nothing.
5. **Restarts.** ``lineage`` > 0 replays the same trends with fresh noise and without the
   spikes, as after a restart from a checkpoint that skipped the bad batches.

Everything is a pure function of ``(seed, step)``: noise comes from a counter-based hash of
the step, so any ``block(start, stop)`` gives the same values for the same steps however the
range is cut. Generating 80k steps with per-layer metrics every 10 steps takes a few tens of
milliseconds.

>>> run = SimulatedRun(seed=0)
>>> steps, metrics = run.block(0, 1000, layer_every=10)
>>> round(float(metrics["params/norm/final_norm.weight"][0]), 1)
78.4
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

FINAL_NORM_INIT = math.sqrt(6144)
"""Norm of an all-ones RMSNorm gain over a 6144-wide residual stream (≈ 78.38)."""
FINAL_NORM_AT_EVENT = 342.0
PEAK_LR = 3e-4
WARMUP_STEPS = 2000

_SLOPE_GAIN_AFTER_EVENT = 3.0
"""Extra final_norm slope after the config change, as a multiple of the slope before it."""
_SURGE_MAX = 8.0
_SURGE_STEPS = 3000.0

# Noise streams: one per core metric, then a block per layer-wise family.
_STREAM_CORE = 0
_STREAM_LAYER_GRAD = 1000
_STREAM_LAYER_UPDATE = 2000


# -- trends: each a pure, vectorised function of the step -----------------------------------


def final_norm_gain(t: FloatArray, event_step: int) -> FloatArray:
    """``‖final_norm.weight‖``: phenomenon 1.

    Before the event: ``F0 + (F_E - F0) (1 - exp(-t/E)) / (1 - exp(-1))``, a concave climb
    from 78.4 to ``F_E`` = 342 at step ``E``. After it a softplus (width 100 steps) adds
    `_SLOPE_GAIN_AFTER_EVENT` times the pre-event slope, so the slope is ≈ 4x steeper.
    """
    span = float(event_step)
    growth = (FINAL_NORM_AT_EVENT - FINAL_NORM_INIT) / (1.0 - math.exp(-1.0))
    before = FINAL_NORM_INIT + growth * -np.expm1(-t / span)
    slope_at_event = growth * math.exp(-1.0) / span
    width = 100.0
    extra_slope = _SLOPE_GAIN_AFTER_EVENT * slope_at_event
    after = extra_slope * width * np.logaddexp(0.0, (t - span) / width)
    result: FloatArray = before + after
    return result


def routing_surge(t: FloatArray, event_step: int) -> FloatArray:
    """Gradient multiplier from the config change (phenomenon 1): 1 before ``event_step``,
    then ``1 + (M - 1) (1 - exp(-((t - E) / τ)²))`` with M = 8, τ = 3000 steps, so the
    total grad norm passes 5 roughly 3k steps after the change."""
    since = np.maximum(t - event_step, 0.0) / _SURGE_STEPS
    result: FloatArray = 1.0 + (_SURGE_MAX - 1.0) * -np.expm1(-(since**2))
    return result


def early_transient(t: FloatArray) -> FloatArray:
    """Large gradients of the first few hundred steps: ``1 + 8 exp(-t / 400)``."""
    result: FloatArray = 1.0 + 8.0 * np.exp(-t / 400.0)
    return result


def learning_rate(t: FloatArray, event_step: int) -> FloatArray:
    """Linear warmup over 2k steps to 3e-4, cosine decay to a tenth by ``1.5 * event_step``."""
    horizon = 1.5 * event_step
    warm = PEAK_LR * np.minimum(t + 1.0, WARMUP_STEPS) / WARMUP_STEPS
    progress = np.clip((t - WARMUP_STEPS) / (horizon - WARMUP_STEPS), 0.0, 1.0)
    cosine = PEAK_LR * (0.1 + 0.45 * (1.0 + np.cos(math.pi * progress)))
    result: FloatArray = np.where(t < WARMUP_STEPS, warm, cosine)
    return result


def loss_curve(t: FloatArray) -> FloatArray:
    """Smooth training loss: ``2.05 + 9 (1 + t/250)^-0.33`` (≈ 11 at step 0, ≈ 3.4 at 80k);
    it keeps falling while the grad norm grows (phenomenon 3)."""
    result: FloatArray = 2.05 + 9.0 * (1.0 + t / 250.0) ** -0.33
    return result


def depth_profile(n_layers: int, steepness: FloatArray) -> FloatArray:
    """Per-layer grad-norm multipliers, shape ``(n_layers, len(steepness))``: phenomenon 2.

    ``1 + a(t) (exp(-i/1.5) + 0.6 exp(-(L-1-i)/1.5))``: ≈ 1 in the middle, raised at
    layer 0 and the last layer, more so as the steepness ``a(t)`` grows.
    """
    depth = np.arange(n_layers, dtype=np.float64)
    ends = np.exp(-depth / 1.5) + 0.6 * np.exp(-(n_layers - 1 - depth) / 1.5)
    result: FloatArray = 1.0 + steepness[np.newaxis, :] * ends[:, np.newaxis]
    return result


def _depth_moments(n_layers: int) -> tuple[float, float]:
    """``Σ d_i`` and ``Σ d_i²`` of the depth shape, for the closed-form total grad norm."""
    ends = depth_profile(n_layers, np.ones(1))[:, 0] - 1.0
    return float(ends.sum()), float((ends**2).sum())


# -- noise: counter-based, so values depend only on (seed, lineage, stream, step) ------------

_U64 = np.uint64


def _splitmix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    x = x + _U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    result: NDArray[np.uint64] = x ^ (x >> _U64(31))
    return result


def standard_normal(
    seed: int, lineage: int, streams: NDArray[np.int64], steps: NDArray[np.int64]
) -> FloatArray:
    """N(0, 1) draws of shape ``(len(streams), len(steps))``, a pure function of each
    ``(seed, lineage, stream, step)`` (splitmix64 hash, then Box-Muller)."""
    keys = np.array([(seed * 1_000_003 + lineage) % 2**64], dtype=np.uint64)
    keys = _splitmix64(_splitmix64(keys) ^ streams.astype(np.uint64))
    first = _splitmix64(keys[:, np.newaxis] ^ _splitmix64(steps.astype(np.uint64))[np.newaxis, :])
    second = _splitmix64(first)
    scale = 2.0**-53
    u1 = ((first >> _U64(11)).astype(np.float64) + 0.5) * scale
    u2 = ((second >> _U64(11)).astype(np.float64) + 0.5) * scale
    result: FloatArray = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return result


# -- spikes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Spike:
    """One update-norm spike and, unless ``loss_step`` is None, the loss spike it led to."""

    update_step: int
    loss_step: int | None
    update_factor: float
    """Peak multiplier of ``updates/norm/total`` (≈ 2)."""
    loss_jump: float
    """Peak added to ``train/loss``, in nats."""
    grad_factor: float
    """Peak multiplier of the grad norms at ``loss_step``."""
    recovery_steps: float
    """Time constant of the loss's exponential recovery."""


def draw_spikes(seed: int, event_step: int, count: int = 7, silent: int = 2) -> tuple[Spike, ...]:
    """``count`` spikes spread over ``[0.09, 0.93] * event_step``; ``silent`` of them have no
    loss spike. Leads from update spike to loss spike are 3-10 steps."""
    rng = np.random.default_rng(seed)
    anchors = np.linspace(0.09, 0.93, count) * event_step
    starts = (anchors + rng.integers(-400, 401, count)).astype(int)
    leads = rng.integers(3, 11, count)
    quiet = set(rng.choice(count, size=silent, replace=False).tolist())
    return tuple(
        Spike(
            update_step=int(starts[i]),
            loss_step=None if i in quiet else int(starts[i] + leads[i]),
            update_factor=float(rng.uniform(1.85, 2.2)),
            loss_jump=float(rng.uniform(0.25, 0.6)),
            grad_factor=float(rng.uniform(2.0, 3.0)),
            recovery_steps=float(rng.uniform(20.0, 50.0)),
        )
        for i in range(count)
    )


def _add_decay(
    out: FloatArray, t: FloatArray, at: int, height: float, time_constant: float
) -> None:
    """``out += height * exp(-(t - at) / τ)`` from ``at`` on; ``t`` ascending. Only the
    window where the term exceeds ~1e-9 of ``height`` is touched, which keeps it cheap."""
    begin, end = np.searchsorted(t, [at, at + 20.0 * time_constant])
    if begin < end:
        out[begin:end] += height * np.exp(-(t[begin:end] - at) / time_constant)


@dataclass(frozen=True, slots=True)
class _SpikeResponse:
    update: FloatArray
    """Excess of the update-norm multiplier over 1 (scaled per layer by depth)."""
    first_moment: FloatArray
    loss: FloatArray
    grad: FloatArray

    def take(self, mask: NDArray[np.bool_]) -> _SpikeResponse:
        return _SpikeResponse(*(getattr(self, f)[mask] for f in self.__slots__))


def _spike_response(t: FloatArray, spikes: tuple[Spike, ...]) -> _SpikeResponse:
    """The spikes' effect on each affected series, over ascending steps ``t``."""
    update = np.zeros_like(t)
    first_moment = np.zeros_like(t)
    loss = np.zeros_like(t)
    grad = np.ones_like(t)
    for spike in spikes:
        _add_decay(update, t, spike.update_step, spike.update_factor - 1.0, 1.5)
        _add_decay(first_moment, t, spike.update_step, 1.0, 20.0)
        if spike.loss_step is not None:
            _add_decay(loss, t, spike.loss_step, spike.loss_jump, spike.recovery_steps)
            _add_decay(grad, t, spike.loss_step, spike.grad_factor - 1.0, 2.0)
    return _SpikeResponse(update, first_moment, loss, grad)


# -- the run -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Trends:
    """Noise-free series over a block of steps; grad norms before spikes."""

    gain: FloatArray
    lm_head: FloatArray
    embed: FloatArray
    middle: FloatArray
    steepness: FloatArray
    grad_total: FloatArray
    lr: FloatArray
    update_total: FloatArray
    logits_scale: FloatArray

    def take(self, mask: NDArray[np.bool_]) -> _Trends:
        return _Trends(*(getattr(self, f)[mask] for f in self.__slots__))


def _trends(
    t: FloatArray, event_step: int, depth_sum: float, depth_sum_sq: float, n: int
) -> _Trends:
    """Every smooth series, from the terms above.

    The lm_head grad norm is proportional to the final_norm gain (its input feature scales
    with it); embedding and middle layers grow slowly. The total is the exact global norm
    ``sqrt(lm_head² + embed² + Σ layer_i²)``, the layer sum in closed form from the depth
    moments.
    """
    gain = final_norm_gain(t, event_step)
    ratio = gain / FINAL_NORM_INIT
    scale = routing_surge(t, event_step) * early_transient(t)
    slow = -np.expm1(-t / 40_000.0)
    lm_head = 0.17 * ratio * scale
    embed = 0.07 * (1.0 + 1.2 * slow) * scale
    middle = 0.04 * (1.0 + 0.6 * slow) * scale
    steepness = 1.0 + 0.45 * (ratio - 1.0)
    layers_sq = middle**2 * (n + 2.0 * steepness * depth_sum + steepness**2 * depth_sum_sq)
    lr = learning_rate(t, event_step)
    return _Trends(
        gain=gain,
        lm_head=lm_head,
        embed=embed,
        middle=middle,
        steepness=steepness,
        grad_total=np.sqrt(lm_head**2 + embed**2 + layers_sq),
        lr=lr,
        update_total=3.0 * lr / PEAK_LR,
        logits_scale=2.0 * ratio * np.sqrt(scale),
    )


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
        self._depth_sum, self._depth_sum_sq = _depth_moments(n_layers)
        depth = np.arange(n_layers, dtype=np.float64) / (n_layers - 1)
        update_shape = 1.15 - 0.3 * depth
        self._update_shape: FloatArray = update_shape / np.sqrt(np.mean(update_shape**2))
        self._update_spike_shape: FloatArray = 1.5 - depth
        """Update-norm spikes are larger in lower layers (phenomenon 4)."""

    def events(self) -> list[tuple[int, str, str]]:
        """``(step, kind, text)`` annotations for the charts."""
        return [
            (0, "config", "z-loss 1e-4; no weight decay on final_norm"),
            (self.event_step, "config", "near-dropless EP routing"),
        ]

    def layer_names(self) -> list[str]:
        """Per-layer metric names, in the order `block` returns them."""
        grads = [f"grad/norm/layers.{i}" for i in range(self.n_layers)]
        updates = [f"updates/norm/layers.{i}" for i in range(self.n_layers)]
        return ["grad/norm/embed", *grads, "grad/norm/lm_head", *updates]

    def block(
        self, start: int, stop: int, *, layer_every: int = 1, lineage: int = 0
    ) -> tuple[NDArray[np.int64], dict[str, FloatArray]]:
        """Steps ``start..stop-1`` and every metric over them.

        Per-layer metrics are NaN except on multiples of ``layer_every`` (not logged there).
        """
        if not 0 <= start <= stop:
            raise ValueError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
        if layer_every < 1:
            raise ValueError(f"layer_every must be >= 1, got {layer_every}")
        steps = np.arange(start, stop, dtype=np.int64)
        t = steps.astype(np.float64)
        spikes = self.spikes if lineage == 0 else ()
        response = _spike_response(t, spikes)
        noise = standard_normal(self.seed, lineage, np.arange(6, dtype=np.int64), steps)

        trends = _trends(t, self.event_step, self._depth_sum, self._depth_sum_sq, self.n_layers)
        params_rest = 1500.0 * (1.0 + 1.1 * -np.expm1(-t / 50_000.0))
        mu_spike = 1.0 + response.first_moment

        metrics: dict[str, FloatArray] = {
            "train/loss": loss_curve(t) + response.loss + 0.03 * noise[0],
            "grad/norm/total": trends.grad_total * response.grad * np.exp(0.06 * noise[1]),
            "params/norm/final_norm.weight": trends.gain,
            "params/norm/total": np.sqrt(params_rest**2 + trends.gain**2),
            "optim/lr": trends.lr,
            "updates/norm/total": trends.update_total
            * (1.0 + response.update)
            * np.exp(0.03 * noise[2]),
            "optim/mu/norm/total": 0.5 * trends.grad_total * mu_spike * np.exp(0.03 * noise[3]),
            "optim/nu/norm/total": 0.02 * trends.grad_total**2 * np.exp(0.02 * noise[4]),
            "train/z_loss": 1e-4 * trends.logits_scale**2 * np.exp(0.05 * noise[5]),
        }

        logged = steps % layer_every == 0
        per_layer = np.full((2 * self.n_layers + 2, len(steps)), np.nan)
        if logged.any():
            per_layer[:, logged] = self._layers(
                steps[logged], lineage, trends.take(logged), response.take(logged)
            )
        metrics.update(zip(self.layer_names(), per_layer, strict=True))
        return steps, metrics

    def _layers(
        self, steps: NDArray[np.int64], lineage: int, trends: _Trends, response: _SpikeResponse
    ) -> FloatArray:
        """Rows: embed, layers 0..L-1, lm_head grad norms, then layers 0..L-1 update norms."""
        n = self.n_layers
        grad_noise = standard_normal(
            self.seed, lineage, _STREAM_LAYER_GRAD + np.arange(n + 2, dtype=np.int64), steps
        )
        update_noise = standard_normal(
            self.seed, lineage, _STREAM_LAYER_UPDATE + np.arange(n, dtype=np.int64), steps
        )
        layers = trends.middle * depth_profile(n, trends.steepness)
        grads = np.vstack([trends.embed, layers, trends.lm_head])
        grads *= response.grad * np.exp(0.08 * grad_noise)
        update_spike = 1.0 + self._update_spike_shape[:, np.newaxis] * response.update
        updates = (
            (trends.update_total / math.sqrt(n))
            * self._update_shape[:, np.newaxis]
            * update_spike
            * np.exp(0.04 * update_noise)
        )
        result: FloatArray = np.vstack([grads, updates])
        return result

    def metrics_at(self, step: int, *, per_layer: bool = True) -> dict[str, float]:
        """Every metric at one step (per-layer ones only when ``per_layer``)."""
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
        """``(step, metrics)`` per step, as a trainer would log them: per-layer metrics only
        every ``layer_every`` steps. Computed ``chunk`` steps at a time."""
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
