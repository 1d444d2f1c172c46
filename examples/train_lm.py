"""Train a small character-level transformer language model and stream its stability metrics.

A decoder-only transformer (Flax linen, pre-RMSNorm, causal self-attention, GELU MLP; the
blocks stacked with ``nn.scan`` under the name ``layers``) learns to predict the next
character of a snapshot of this repository's documentation, on the CPU. Every step, inside
the jitted train step, `normwatch.client.jax.stability_metrics` computes the global and
per-layer norms of gradients, parameters and updates and Adam's moments; the training loop
hands them to `normwatch.client.Run.log` as device scalars, which never waits for them.

    python examples/train_lm.py --url http://127.0.0.1:8000 --token nw_... --name lm-1
    python examples/train_lm.py --url ... --token ... --name lm-unstable --unstable
    python examples/train_lm.py --steps 50          # no --url: train and print, send nothing

``--unstable`` trains at a constant learning rate (1e-2) with β1 = 0.95, without gradient
clipping and, for the last 30 of every 100 steps, on one batch drawn again and again
(``--stuck-every``, ``--stuck-steps``, ``--b1``): the gradients stop cancelling from step
to step, so Adam's first moment grows while its second, the gradients' size, stays flat,
and the update norm climbs; when fresh batches come back the momentum carries the
parameters on, and the loss and the grad norm spike after the updates. That is the pattern
of a large run's loss spikes, on a CPU in about a minute:

    python examples/train_lm.py --url ... --token ... --name lm-unstable --unstable \
        --steps 500 --layers 2 --d-model 64 --batch-size 64 --every 10

and then ``GET /api/v1/runs/{id}/spikes?metric=updates/norm/total&metric=train/loss&metric=
grad/norm/total&threshold=4`` (a 64-sequence batch's loss is noisy; 4 noise SDs, not the
default 10) finds four update-norm spikes of ×1.5–2.4, with the first moment up ×1.5–2.4
in each and the second within 1 %; loss spikes 22 steps after two of them (two leaders
have no follower), grad-norm spikes 16 steps after three, 4.6 % of steps in a loss spike.
``scripts/sweep-instability`` searched the settings (what was tried is in
docs/analytics.md).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from normwatch.client import Run
from normwatch.client.jax import computed_at, is_logging_process, stability_metrics

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TEXT = [ROOT / "examples" / "data" / "docs.txt"]
"""A snapshot of this repository's README and docs, kept as it was so that a run's numbers
(those quoted below and in docs/analytics.md) are the same at every commit."""


class Mlp(nn.Module):
    d_model: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = nn.gelu(nn.Dense(4 * self.d_model, name="w1")(x))
        return nn.Dense(self.d_model, name="w2")(hidden)


class Block(nn.Module):
    """One pre-norm transformer block, in the ``(carry, x) -> (carry, y)`` form ``nn.scan``
    needs."""

    d_model: int
    n_heads: int

    @nn.compact
    def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
        causal = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        attention = nn.MultiHeadDotProductAttention(num_heads=self.n_heads, name="attn")
        x = x + attention(nn.RMSNorm(name="attn_norm")(x), mask=causal)
        x = x + Mlp(self.d_model, name="mlp")(nn.RMSNorm(name="mlp_norm")(x))
        return x, None


class CharLM(nn.Module):
    vocab_size: int
    context: int
    d_model: int
    n_layers: int
    n_heads: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(self.vocab_size, self.d_model, name="embed")(tokens)
        positions = self.param(
            "pos_embed", nn.initializers.normal(0.02), (self.context, self.d_model)
        )
        x = x + positions[: tokens.shape[1]]
        # Stacked blocks: every parameter under "layers" has a leading axis of n_layers,
        # which stability_metrics splits into layers.0 ... layers.{n_layers - 1}.
        blocks = nn.scan(
            Block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=self.n_layers,
        )
        x, _ = blocks(self.d_model, self.n_heads, name="layers")(x, None)
        x = nn.RMSNorm(name="final_norm")(x)
        return nn.Dense(self.vocab_size, use_bias=False, name="lm_head")(x)


class TrainState(NamedTuple):
    params: Any
    opt_state: Any
    step: jax.Array


def load_text(paths: Sequence[Path]) -> tuple[np.ndarray, list[str]]:
    """The files' characters as int32 token ids, and the vocabulary (sorted characters)."""
    text = "\n\n".join(path.read_text(encoding="utf-8") for path in paths)
    vocabulary = sorted(set(text))
    index = {char: i for i, char in enumerate(vocabulary)}
    return np.array([index[char] for char in text], dtype=np.int32), vocabulary


def make_optimizer(args: argparse.Namespace) -> tuple[optax.GradientTransformation, Any]:
    """AdamW with warm-up and cosine decay behind global-norm clipping; with ``--unstable``
    a large constant rate and no clipping."""
    if args.unstable:
        schedule = optax.constant_schedule(args.lr)
        return optax.adamw(schedule, b1=args.b1, b2=0.999, weight_decay=0.0), schedule
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, args.lr, warmup_steps=max(args.steps // 10, 1), decay_steps=args.steps
    )
    adamw = optax.adamw(schedule, b1=args.b1, b2=0.95, weight_decay=0.1)
    return optax.chain(optax.clip_by_global_norm(1.0), adamw), schedule


STUCK_DRAWS = 1 << 24
"""Where a stuck stretch's batch draw is numbered from: past any step's own."""


def stuck_stretch(step: jax.Array, args: argparse.Namespace) -> jax.Array:
    """Whether ``step`` is in a stuck stretch: the last ``stuck_steps`` of every
    ``stuck_every`` steps, from the second period on."""
    into = step % args.stuck_every
    return (step >= args.stuck_every) & (into >= args.stuck_every - args.stuck_steps)


def make_train_step(
    model: CharLM,
    tx: optax.GradientTransformation,
    schedule: Callable[[jax.Array], jax.Array],
    data: jax.Array,
    args: argparse.Namespace,
) -> Callable[[TrainState], tuple[TrainState, dict[str, jax.Array]]]:
    data_key = jax.random.key(args.seed + 1)

    def loss_fn(params: Any, tokens: jax.Array) -> jax.Array:
        logits = model.apply({"params": params}, tokens[:, :-1])
        losses = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
        return jnp.mean(losses)

    def train_step(state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
        # The batch is sampled on the device from the text already there: no host work.
        # In a stuck stretch (--unstable) every step draws the same batch: the gradients
        # stop cancelling from step to step, so Adam's first moment grows while its second
        # (the gradients' size) stays flat, and the updates with it.
        stuck = stuck_stretch(state.step, args) if args.unstable else False
        draw = jnp.where(stuck, STUCK_DRAWS + state.step // args.stuck_every, state.step)
        key = jax.random.fold_in(data_key, draw)
        starts = jax.random.randint(key, (args.batch_size,), 0, data.shape[0] - args.context - 1)
        tokens = data[starts[:, None] + jnp.arange(args.context + 1)]
        loss, grads = jax.value_and_grad(loss_fn)(state.params, tokens)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        norms = stability_metrics(
            grads, state.params, updates, opt_state, every=args.every, step=state.step
        )
        params = optax.apply_updates(state.params, updates)
        metrics = {"train/loss": loss, "optim/lr": schedule(state.step), **norms}
        return TrainState(params, opt_state, state.step + 1), metrics

    return jax.jit(train_step, donate_argnums=0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="normwatch server; without it nothing is sent")
    parser.add_argument("--token", help="an ingest token of the project")
    parser.add_argument("--project", help="project name (default: the token's project)")
    parser.add_argument("--name", default="char-lm", help="run name (the same name resumes)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, help="peak learning rate (3e-3; 1e-2 --unstable)")
    parser.add_argument("--b1", type=float, help="Adam's first-moment decay (0.9; 0.95 --unstable)")
    parser.add_argument(
        "--unstable",
        action="store_true",
        help="constant LR, no clipping, and stuck stretches of one batch: update-norm spikes "
        "that loss spikes follow",
    )
    parser.add_argument(
        "--stuck-every", type=int, default=100, help="with --unstable: a stuck stretch every N"
    )
    parser.add_argument(
        "--stuck-steps", type=int, default=30, help="with --unstable: steps a stretch lasts"
    )
    parser.add_argument(
        "--every", type=int, default=1, help="per-layer norms every N steps (totals always)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--text", type=Path, nargs="+", default=DEFAULT_TEXT, help="training text files"
    )
    args = parser.parse_args(argv)
    if args.lr is None:
        args.lr = 1e-2 if args.unstable else 3e-3
    if args.b1 is None:
        args.b1 = 0.95 if args.unstable else 0.9
    if args.url and not args.token:
        parser.error("--url needs --token")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    tokens, vocabulary = load_text(args.text)
    model = CharLM(len(vocabulary), args.context, args.d_model, args.layers, args.heads)
    tx, schedule = make_optimizer(args)
    params = model.init(jax.random.key(args.seed), jnp.zeros((1, args.context), jnp.int32))
    state = TrainState(params["params"], tx.init(params["params"]), jnp.array(0, jnp.int32))
    train_step = make_train_step(model, tx, schedule, jnp.asarray(tokens), args)
    n_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(state.params))
    print(f"{n_params:,} parameters, {len(tokens):,} characters, vocabulary {len(vocabulary)}")

    run = None
    if args.url and is_logging_process():
        config = {k: v for k, v in vars(args).items() if k not in ("url", "token", "text")}
        run = Run(
            args.url,
            token=args.token,
            project=args.project,
            name=args.name,
            config={**config, "parameters": n_params},
            tags=["example", "unstable" if args.unstable else "stable"],
        )
        if args.unstable:
            run.event(
                f"constant LR {args.lr:g}, no clipping, one batch for the last "
                f"{args.stuck_steps} of every {args.stuck_every} steps",
                step=0,
                kind="config",
            )

    started = time.perf_counter()
    for step in range(args.steps):
        state, metrics = train_step(state)
        if run is not None:
            # Device scalars go straight in: the sender thread copies them to the host.
            run.log(computed_at(metrics, step=step, every=args.every), step=step)
        if step % 50 == 0 or step == args.steps - 1:
            # Reading the values waits for the step; done only for the console.
            print(
                f"step {step:5d}  loss {float(metrics['train/loss']):.3f}  "
                f"grad norm {float(metrics['grad/norm/total']):.3f}  "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
    if run is not None:
        run.finish()
        print(f"sent {run.sent_points:,} points to run {run.run_id}")


if __name__ == "__main__":
    main()
