"""Train a small MLP with Optax on the CPU, logging through the Levanter tracker for normwatch.

The config (``config.yaml`` beside this file) is read as a Levanter job reads it: with
Levanter installed, draccus decodes ``trainer.tracker`` into Levanter's ``TrackerConfig``
(importing `normwatch.client.levanter` registered its ``normwatch`` choice); without it,
PyYAML reads the file and the section, less its ``type:``, becomes a `NormwatchConfig`.
``init(run_id)`` makes the tracker, and the loop calls it as Levanter's trainer does:

- ``log_hyperparameters`` with the whole config and ``log_summary`` with the parameter
  count, before the first step (``levanter.initialize``, ``train_lm``);
- each step, the watch callback's norms from inside ``jit`` with ``commit=False``
  (``grad/norm/total``, ``grad/norm/<path>``, the same under ``params/norm/`` and
  ``updates/norm/``), then the trainer's own ``train/loss``, ``optim/learning_rate`` and
  ``throughput/*`` at the same step, which hands the step over;
- ``finish()`` at the end.

    NORMWATCH_TOKEN=nw_... python examples/levanter/train.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import yaml

from normwatch.client.levanter import NormwatchConfig

CONFIG = Path(__file__).resolve().parent / "config.yaml"

Params = dict[str, Any]


def tracker_config(section: dict[str, Any]) -> NormwatchConfig:
    """``trainer.tracker`` as the config class Levanter's registry gives ``type:``."""
    if importlib.util.find_spec("levanter") is not None:
        import draccus
        import levanter.tracker

        decoded = draccus.decode(levanter.tracker.TrackerConfig, section)
        assert isinstance(decoded, NormwatchConfig), f"tracker type {section.get('type')!r}"
        return decoded
    fields = {key: value for key, value in section.items() if key != "type"}
    if section.get("type") != "normwatch":
        raise SystemExit(
            f"this example logs to normwatch; got tracker type {section.get('type')!r}"
        )
    return NormwatchConfig(**fields)


def init_params(seed: int, inputs: int, hidden: int, layers: int) -> Params:
    # NumPy on the host: eager JAX ops would each compile before the first step.
    rng = np.random.default_rng(seed)

    def dense(n_in: int, n_out: int) -> dict[str, np.ndarray]:
        return {"weight": (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)}

    return {
        "embed": dense(inputs, hidden),
        "layers": [
            {**dense(hidden, hidden), "bias": np.zeros(hidden, np.float32)} for _ in range(layers)
        ],
        "head": dense(hidden, 1),
    }


def predict(params: Params, x: jax.Array) -> jax.Array:
    h = x @ params["embed"]["weight"]
    for layer in params["layers"]:
        h = h + jax.nn.gelu(h @ layer["weight"] + layer["bias"])
    return (h @ params["head"]["weight"])[:, 0]


def watch_norms(prefix: str, tree: Params) -> dict[str, jax.Array]:
    """What Levanter's watch callback logs for one tree: ``<prefix>/norm/<path>`` for each
    leaf, its path's keys joined with ``.``, and ``<prefix>/norm/total``."""
    out: dict[str, jax.Array] = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        name = ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        out[f"{prefix}/norm/{name}"] = jnp.linalg.norm(leaf)
    out[f"{prefix}/norm/total"] = optax.global_norm(tree)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--url", help="overrides trainer.tracker.url")
    parser.add_argument("--project", help="overrides trainer.tracker.project")
    parser.add_argument("--name", help="overrides trainer.tracker.name (default: trainer.id)")
    parser.add_argument("--steps", type=int, help="overrides trainer.num_train_steps")
    args = parser.parse_args(argv)

    raw = yaml.safe_load(args.config.read_text())
    trainer, model, opt = raw["trainer"], raw["model"], raw["optimizer"]
    given = {"url": args.url, "project": args.project, "name": args.name}
    overrides = {key: value for key, value in given.items() if value}
    tracker = dataclasses.replace(tracker_config(trainer["tracker"]), **overrides).init(
        trainer["id"]
    )
    steps = args.steps or trainer["num_train_steps"]

    tracker.log_hyperparameters(raw)
    params = init_params(0, model["inputs"], model["hidden"], model["layers"])
    tracker.log_summary({"parameter_count": sum(x.size for x in jax.tree_util.tree_leaves(params))})
    schedule = optax.cosine_decay_schedule(opt["learning_rate"], steps)
    tx = optax.adamw(schedule, weight_decay=opt["weight_decay"])
    opt_state = jax.jit(tx.init)(params)
    rng = np.random.default_rng(1)
    target = rng.standard_normal(model["inputs"]).astype(np.float32)

    @jax.jit
    def train_step(
        params: Params, opt_state: optax.OptState, x: jax.Array, y: jax.Array, step: jax.Array
    ) -> tuple[Params, optax.OptState, jax.Array, dict[str, jax.Array]]:

        def loss_fn(p: Params) -> jax.Array:
            return jnp.mean((predict(p, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        watched = {
            **watch_norms("grad", grads),
            **watch_norms("params", params),
            **watch_norms("updates", updates),
        }
        metrics = {"train/loss": loss, "optim/learning_rate": schedule(step), **watched}
        return optax.apply_updates(params, updates), opt_state, loss, metrics

    loss = jnp.nan
    for step in range(steps):
        started = time.perf_counter()
        x = rng.standard_normal((64, model["inputs"])).astype(np.float32)
        y = np.sin(x @ target)
        loading_time = time.perf_counter() - started
        params, opt_state, loss, metrics = train_step(params, opt_state, x, y, step)
        watched = {k: v for k, v in metrics.items() if "/norm/" in k}
        tracker.log(watched, step=step, commit=False)  # as jit_log from inside the step
        tracker.log(
            {
                "train/loss": metrics["train/loss"],
                "optim/learning_rate": metrics["optim/learning_rate"],
                "throughput/loading_time": loading_time,
                "throughput/duration": time.perf_counter() - started,
            },
            step=step,
        )
    tracker.finish()
    run = tracker.run
    print(f"final loss {float(loss):.4f} after {steps} steps; run {run.run_id if run else None}")


if __name__ == "__main__":
    main()
