"""What wandb records of a ``wandb.log`` call: the step it lands on, the values that are numbers.

Pure functions, with no wandb import, for `normwatch.client.wandb_mirror`. The step rules
are those of wandb-core's history handler (non-shared mode); the value rules follow what
wandb's ``json_friendly`` makes of a value before it is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .importers._values import is_wandb_internal

_REJECTED_KINDS = frozenset("bOSUaMmc")
"""NumPy dtype kinds wandb does not record as a number: bool, object, text, dates, complex."""

_MAX_DEPTH = 32


def next_wandb_step(current: int, step: int | None, commit: bool | None) -> tuple[int | None, int]:
    """Where one ``wandb.log(data, step=step, commit=commit)`` lands, and the step after it.

    ``current`` is the step that data without ``step=`` goes to. Returns ``(landed, next)``
    with ``landed`` None when wandb drops the call (``step < current``; the step stays).
    Otherwise ``landed = max(current, step)`` and the call commits when ``commit`` says
    so, or when neither ``step`` nor ``commit`` is given; a commit makes ``next = landed + 1``.

    >>> next_wandb_step(0, None, None), next_wandb_step(0, None, False)
    ((0, 1), (0, 0))
    >>> next_wandb_step(3, 10, None), next_wandb_step(3, 10, True), next_wandb_step(11, 5, True)
    ((10, 10), (10, 11), (None, 11))
    >>> next_wandb_step(10, 10, None), next_wandb_step(10, None, None)
    ((10, 10), (10, 11))
    """
    if step is not None:
        if step < current:
            return None, current
        current = step
    commits = commit if commit is not None else step is None
    return current, current + 1 if commits else current


def _is_scalar(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return False
    try:
        size = math.prod(int(n) for n in shape)
    except Exception:
        return False
    kind = getattr(dtype, "kind", None)
    if kind is None:  # not a NumPy dtype (a PyTorch tensor): judged by its name
        return size == 1 and "bool" not in str(dtype) and "complex" not in str(dtype)
    return size == 1 and kind not in _REJECTED_KINDS


def scalar_metrics(data: Mapping[str, object], separator: str = ".") -> dict[str, object]:
    """The real scalars of one ``wandb.log`` dict, nested dicts flattened with ``separator``.

    W&B's own entries (``_step``, ``_timestamp``, ``_runtime``, ``_wandb...``) and values
    wandb does not record as a number are left out.

    >>> scalar_metrics({"loss": 2.5, "val": {"acc": 0.9, "ok": True}, "_timestamp": 1.0})
    {'loss': 2.5, 'val.acc': 0.9}
    """
    flat: dict[str, object] = {}

    def visit(prefix: str, value: object, depth: int) -> None:
        if isinstance(value, Mapping):
            if depth < _MAX_DEPTH:
                for key, item in value.items():
                    visit(f"{prefix}{separator}{key}", item, depth + 1)
        elif _is_scalar(value):
            flat[prefix] = value

    for name, value in data.items():
        if name != "_step" and not is_wandb_internal(name):
            visit(name, value, 0)
    return flat
