"""A Flax + Optax trainer that logs packed norms and obeys requests from the dashboard.

A residual MLP (Flax linen, its blocks stacked with ``nn.scan`` under ``layers``) learns a
fixed random regression on the CPU. Inside the jitted step,
``stability_metrics(..., packed=True)`` returns every norm (totals, per layer, per leaf) as
one device vector with the names kept on the host, so the step has one output for them
however many layers there are, and `normwatch.client.Run.log` queues it without a copy.

Between steps the loop asks the run whether anyone wants something of it, which costs no
request: the answers to the client's metric batches carry it.

- ``run.should_checkpoint()``: an admin pressed *Checkpoint* on the run page (or called
  ``POST /api/v1/runs/{id}/control``), or an alert rule with ``"control": "checkpoint"``
  fired. The loop saves the parameters and optimizer state and logs a ``checkpoint`` event.
- ``run.should_stop()``: the same for *Stop*. The loop saves a checkpoint, marks the run
  finished and leaves.

    python examples/flax_packed.py --url http://127.0.0.1:8000 --token nw_... --name mlp-1
    python examples/flax_packed.py --steps 100      # no --url: train and print, send nothing
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax import serialization

from normwatch.client import Run
from normwatch.client.jax import stability_metrics


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
        hidden = nn.gelu(nn.Dense(2 * self.width, name="up")(nn.LayerNorm(name="norm")(x)))
        return x + nn.Dense(self.width, name="down")(hidden), None


class ResidualMlp(nn.Module):
    width: int
    layers: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(self.width, name="embed")(x)
        stack = nn.scan(
            Block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=self.layers,
        )
        x, _ = stack(self.width, name="layers")(x, None)
        return nn.Dense(1, name="head")(nn.LayerNorm(name="final_norm")(x))


@dataclass
class Outcome:
    """What a training loop did: the last step it logged, why it stopped, its checkpoints."""

    last_step: int = -1
    stopped_by: str | None = None
    """The reason of the stop request that ended it, if one did."""
    checkpoints: list[Path] = field(default_factory=list)


def train(
    run: Run | None,
    *,
    steps: int = 300,
    width: int = 64,
    layers: int = 4,
    lr: float = 1e-3,
    checkpoint_dir: Path = Path("checkpoints"),
    on_step: Callable[[int], None] | None = None,
) -> Outcome:
    """Train, logging every step to ``run`` (None: log nothing) and obeying its requests.
    ``on_step`` is called after each step is logged."""
    model = ResidualMlp(width, layers)
    inputs = jax.random.normal(jax.random.key(0), (256, 16))
    targets = jnp.sin(inputs.sum(axis=1, keepdims=True))
    params = model.init(jax.random.key(1), inputs)["params"]
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr))
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params: Any, opt_state: Any) -> tuple[Any, Any, jax.Array, Any]:
        def loss_fn(p: Any) -> jax.Array:
            return jnp.mean((model.apply({"params": p}, inputs) - targets) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        norms = stability_metrics(grads, params, updates, opt_state, packed=True)
        return optax.apply_updates(params, updates), opt_state, loss, norms

    outcome = Outcome()
    for step in range(steps):
        params, opt_state, loss, norms = train_step(params, opt_state)
        if run is not None:
            run.log(norms, step=step)  # one device vector: no copy, no sync
            run.log({"train/loss": loss}, step=step)
        outcome.last_step = step
        if on_step is not None:
            on_step(step)
        if run is None:
            if step % 50 == 0:
                print(f"step {step}: loss {float(loss):.4f}")
            continue
        stop = run.should_stop()
        if stop or run.should_checkpoint():
            path = save(checkpoint_dir, step, params, opt_state)
            outcome.checkpoints.append(path)
            run.event(f"checkpoint saved to {path}", step=step, kind="checkpoint")
        if stop:
            request = next(r for r in run.control_requests if r.action == "stop")
            outcome.stopped_by = request.reason or request.source
            print(f"step {step}: stopping as asked ({outcome.stopped_by})")
            break
    return outcome


def save(folder: Path, step: int, params: Any, opt_state: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:08d}.msgpack"
    path.write_bytes(serialization.to_bytes({"params": params, "opt_state": opt_state}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--project")
    parser.add_argument("--name", default="flax-packed")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"))
    args = parser.parse_args()
    if args.url and not args.token:
        parser.error("--url needs --token (an ingest or admin token)")
    run = (
        Run(args.url, token=args.token, project=args.project, name=args.name) if args.url else None
    )
    started = time.monotonic()
    outcome = train(
        run,
        steps=args.steps,
        width=args.width,
        layers=args.layers,
        lr=args.lr,
        checkpoint_dir=args.checkpoint_dir,
    )
    if run is not None:
        run.finish()
    print(
        f"{outcome.last_step + 1} steps in {time.monotonic() - started:.1f} s, "
        f"{len(outcome.checkpoints)} checkpoint(s)"
        + (f", stopped: {outcome.stopped_by}" if outcome.stopped_by else "")
    )


if __name__ == "__main__":
    main()
