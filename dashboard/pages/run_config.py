"""The run page's config: the run's configuration as the trainer posted it, one key a row
(nested keys joined by dots), folded away under a ``<details>``. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dash import html

__all__ = ["NO_CONFIG", "config_parts", "config_section", "flatten_config", "value_text"]

NO_CONFIG = "This run has no config. Trainers post it with Run(..., config={...})."
_CELL = {"padding": ".2rem .6rem", "borderBottom": "1px solid #e4e6eb", "textAlign": "left"}


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Every leaf of ``config`` with its key path joined by dots, in the config's order; an
    empty mapping is a leaf of its own.

    >>> flatten_config({"lr": 3e-4, "model": {"layers": 48, "qk_norm": False}, "tags": {}})
    [('lr', 0.0003), ('model.layers', 48), ('model.qk_norm', False), ('tags', {})]
    """
    found: list[tuple[str, Any]] = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            found += flatten_config(value, name + ".")
        else:
            found.append((name, value))
    return found


def value_text(value: Any) -> str:
    """A config value as JSON writes it (``true``, ``null``, ``[1, 2]``), text as itself.

    >>> value_text(True), value_text("adamw"), value_text([1, 2]), value_text(None)
    ('true', 'adamw', '[1, 2]', 'null')
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def config_section(config: Mapping[str, Any]) -> html.Details:
    """A folded section with one row a key (``model.layers``) and its value, sorted by key
    (the database need not keep the order a trainer posted)."""
    return html.Details(config_parts(config), id="run-config", className="run-config")


def config_parts(config: Mapping[str, Any]) -> list[Any]:
    """What `config_section` holds: its summary ('Config (2 keys)') and the table of keys,
    or the note that there is none. The page's tick puts these in again when the trainer
    posts more keys, so that the section folded open stays open."""
    leaves = sorted(flatten_config(config), key=lambda leaf: leaf[0])
    summary = html.Summary(f"Config ({len(leaves):,} key{'' if len(leaves) == 1 else 's'})")
    if not leaves:
        return [summary, html.P(NO_CONFIG, className="muted")]
    rows = [
        html.Tr(
            [
                html.Td(key, style=_CELL, className="metric"),
                html.Td(value_text(value), style=_CELL),
            ]
        )
        for key, value in leaves
    ]
    table = html.Table(
        [
            html.Thead(html.Tr([html.Th("key", style=_CELL), html.Th("value", style=_CELL)])),
            html.Tbody(rows),
        ],
        className="config",
        style={"borderCollapse": "collapse", "fontSize": ".88rem", "margin": ".4rem 0"},
    )
    return [summary, table]
