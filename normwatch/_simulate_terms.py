"""The terms `normwatch.simulate` builds its metrics from: smooth trends of the step,
counter-based noise and the spikes' responses. Each is a pure, vectorised function."""

from __future__ import annotations

import math
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


def depth_ends(n_layers: int) -> FloatArray:
    """``exp(-i/1.5) + 0.6 exp(-(L-1-i)/1.5)`` for layers ``i = 0..L-1``: ≈ 0 in the
    middle, 1 at layer 0, 0.6 at the last layer."""
    depth = np.arange(n_layers, dtype=np.float64)
    result: FloatArray = np.exp(-depth / 1.5) + 0.6 * np.exp(-(n_layers - 1 - depth) / 1.5)
    return result


def depth_profile(n_layers: int, steepness: FloatArray) -> FloatArray:
    """Per-layer grad-norm multipliers, shape ``(n_layers, len(steepness))``: phenomenon 2.

    ``1 + a(t) · depth_ends(L)[i]``: ≈ 1 in the middle, raised at layer 0 and the last
    layer, more so as the steepness ``a(t)`` grows.
    """
    result: FloatArray = 1.0 + steepness[np.newaxis, :] * depth_ends(n_layers)[:, np.newaxis]
    return result


# -- noise: counter-based, so values depend only on (seed, lineage, stream, step) ------------

_U64 = np.uint64


def _splitmix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    x = x + _U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    result: NDArray[np.uint64] = x ^ (x >> _U64(31))
    return result


def _stream_hashes(
    seed: int, lineage: int, streams: NDArray[np.int64], steps: NDArray[np.int64]
) -> NDArray[np.uint64]:
    """One 64-bit hash per ``(seed, lineage, stream, step)``, shape ``(streams, steps)``."""
    keys = np.array([(seed * 1_000_003 + lineage) % 2**64], dtype=np.uint64)
    keys = _splitmix64(_splitmix64(keys) ^ streams.astype(np.uint64))
    return _splitmix64(keys[:, np.newaxis] ^ _splitmix64(steps.astype(np.uint64))[np.newaxis, :])


def standard_normal(
    seed: int, lineage: int, streams: NDArray[np.int64], steps: NDArray[np.int64]
) -> FloatArray:
    """N(0, 1) draws of shape ``(len(streams), len(steps))``, a pure function of each
    ``(seed, lineage, stream, step)`` (splitmix64 hash, then Box-Muller)."""
    first = _stream_hashes(seed, lineage, streams, steps)
    second = _splitmix64(first)
    scale = 2.0**-53
    u1 = ((first >> _U64(11)).astype(np.float64) + 0.5) * scale
    u2 = ((second >> _U64(11)).astype(np.float64) + 0.5) * scale
    result: FloatArray = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
    return result


def standard_normal_pair(
    seed: int, lineage: int, streams: NDArray[np.int64], steps: NDArray[np.int64]
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Two independent N(0, 1) arrays of shape ``(len(streams), len(steps))`` from one hash
    per ``(seed, lineage, stream, step)``: Box-Muller's cosine and sine branches, with two
    24-bit fields of the hash as the uniforms (so draws stay within ±5.9).

    In float32, whose logarithm, sine and cosine numpy vectorises: for the per-part noise
    drawn at every step that is ~10x faster than `standard_normal`, and noise needs no more
    precision.
    """
    bits = _stream_hashes(seed, lineage, streams, steps)
    scale = np.float32(2.0**-24)
    u1 = ((bits >> _U64(40)).astype(np.float32) + np.float32(0.5)) * scale
    turns = ((bits >> _U64(8)) & _U64(0xFFFFFF)).astype(np.float32) * scale
    angle = turns * np.float32(2.0 * math.pi)
    radius = np.sqrt(np.float32(-2.0) * np.log(u1))
    return radius * np.cos(angle), radius * np.sin(angle)


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
class SpikeResponse:
    """The spikes' effect on each affected series over a block of steps."""

    update: FloatArray
    """Excess of the update-norm multiplier over 1 (scaled per part by depth)."""
    first_moment: FloatArray
    """Excess of the Adam first moment's norm over its trend, as a fraction of it."""
    loss: FloatArray
    """Nats added to the loss."""
    grad: FloatArray
    """Multiplier of every grad norm."""


def spike_response(t: FloatArray, spikes: tuple[Spike, ...]) -> SpikeResponse:
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
    return SpikeResponse(update, first_moment, loss, grad)
