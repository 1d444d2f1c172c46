"""A trainer that logs OLMo-core's metric names, watched under normwatch's canonical names.

OLMo-core records its total gradient norm as ``optim/total grad norm`` and its loss as
``train/CE loss``; normwatch's rules, charts and scripts speak of ``grad/norm/total`` and
``train/loss``. With the project's aliases set to the ``olmo-core`` preset, the names are
stored as logged and read under both: ``series?metric=grad/norm/total`` answers from
``optim/total grad norm``, a rule on ``grad/norm/total`` fires on it, and the run page's
overlay draws it in red against the final norm's gain in blue.

The model is small enough for any CPU and needs only NumPy: a softmax classifier behind an
RMSNorm whose gain has no weight decay (the growth that drives the grad norm up), trained
with Adam under OLMo-core's default warm-up and cosine schedule, with a z-loss.

    python examples/olmo_core_preset.py --url http://127.0.0.1:8000 --token nw_... \\
        --admin-token nw_... --project demo --name olmo-style

``--admin-token`` (with ``--project``) sets the project's aliases to the preset first
(``PUT /api/v1/projects/{project}/aliases``); without it they are left as they are.
"""

from __future__ import annotations

import argparse
import math
import sys

import httpx
import numpy as np
import numpy.typing as npt

from normwatch.client import Run

Array = npt.NDArray[np.float64]

Z_LOSS = 1e-4
"""OLMo-core's ``z_loss_multiplier`` in its example configurations."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="normwatch server; without it nothing is sent")
    parser.add_argument("--token", help="an ingest (or admin) token of the project")
    parser.add_argument("--admin-token", help="an admin token: set the olmo-core preset first")
    parser.add_argument("--project", help="the project (default: the token's)")
    parser.add_argument("--name", default="olmo-style")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=3e-2)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def set_preset(url: str, admin_token: str, project: str) -> None:
    """Set the project's aliases to the OLMo-core preset (an admin's call)."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
        r = api.put(f"/api/v1/projects/{project}/aliases", json={"presets": ["olmo-core"]})
        if r.status_code != 200:
            raise SystemExit(f"setting the olmo-core preset: HTTP {r.status_code} {r.text}")


def lr_at(step: int, steps: int, peak: float) -> float:
    """Linear warm-up over the first 10% of steps, then cosine down to 10% of the peak."""
    warmup = max(1, steps // 10)
    if step < warmup:
        return peak * (step + 1) / warmup
    done = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))


def step_metrics(
    x: Array, y: npt.NDArray[np.int64], gamma: Array, w: Array
) -> tuple[float, float, Array, Array]:
    """CE loss, z-loss and the gradients of ``gamma`` and ``w`` for
    ``logits = (x / rms(x) · gamma) @ w``, with ``Z_LOSS · mean(logsumexp²)`` added."""
    batch = x.shape[0]
    xn = x / np.sqrt(np.mean(x**2, axis=1, keepdims=True) + 1e-6)
    z = xn * gamma
    logits = z @ w
    top = logits.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    p = np.exp(logits - lse[:, None])
    ce = float(np.mean(lse - logits[np.arange(batch), y]))
    zl = float(Z_LOSS * np.mean(lse**2))
    dlogits = p.copy()
    dlogits[np.arange(batch), y] -= 1.0
    dlogits = (dlogits + 2 * Z_LOSS * lse[:, None] * p) / batch
    dw = z.T @ dlogits
    dgamma = ((dlogits @ w.T) * xn).sum(axis=0)
    return ce, zl, dgamma, dw


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    d, classes, batch = 64, 16, 32
    centers = rng.normal(size=(classes, d)) * 0.3
    gamma, w = np.ones(d), rng.normal(size=(d, classes)) * 0.02
    moments = [(np.zeros_like(p), np.zeros_like(p)) for p in (gamma, w)]
    if args.url and args.admin_token:
        if not args.project:
            raise SystemExit("--admin-token needs --project: the project whose aliases to set")
        set_preset(args.url, args.admin_token, args.project)
    run = None
    if args.url:
        if not args.token:
            raise SystemExit("--url needs --token")
        run = Run(
            args.url,
            token=args.token,
            project=args.project,
            name=args.name,
            config={"lr": args.lr, "z_loss_multiplier": Z_LOSS, "trainer": "OLMo-core style"},
        )
    for step in range(args.steps):
        y = rng.integers(0, classes, size=batch)
        x = centers[y] + rng.normal(size=(batch, d))
        ce, zl, dgamma, dw = step_metrics(x, y, gamma, w)
        grad_norm = float(np.sqrt(np.sum(dgamma**2) + np.sum(dw**2)))
        lr = lr_at(step, args.steps, args.lr)
        for i, (param, grad) in enumerate(((gamma, dgamma), (w, dw))):
            m, v = moments[i]
            m[:] = 0.9 * m + 0.1 * grad
            v[:] = 0.95 * v + 0.05 * grad**2
            m_hat, v_hat = m / (1 - 0.9 ** (step + 1)), v / (1 - 0.95 ** (step + 1))
            param -= lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        metrics = {
            # The names OLMo-core's TransformerTrainModule records.
            "train/CE loss": ce,
            "train/Z loss": zl,
            "optim/total grad norm": grad_norm,
            "optim/LR (group 0)": lr,
            # OLMo-core logs no parameter norms; this trainer adds one of its own.
            "params/norm/final_norm.weight": float(np.linalg.norm(gamma)),
        }
        if run is not None:
            run.log(metrics, step=step)
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  CE loss {ce:.4f}  total grad norm {grad_norm:.4f}")
    if run is not None:
        run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
