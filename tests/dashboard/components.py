"""Dash components as the JSON the browser gets, and what tests look for in them."""

from __future__ import annotations

import json
from typing import Any

from plotly.utils import PlotlyJSONEncoder


def tree(component: Any) -> Any:
    """``component`` (and everything in it) as the JSON Dash sends to the browser."""
    return json.loads(json.dumps(component, cls=PlotlyJSONEncoder))


def nodes(component: Any) -> list[dict[str, Any]]:
    """Every component in ``component`` as JSON (``{"type", "props"}``), in document order."""
    return _walk(tree(component))


def _walk(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for child in node:
            found += _walk(child)
    elif isinstance(node, dict) and "props" in node and "type" in node:
        found.append(node)
        found += _walk(node["props"].get("children"))
    return found


def find(component: Any, kind: str | None = None, **props: Any) -> list[dict[str, Any]]:
    """The props of the components of type ``kind`` (``"Td"``, ``"Button"``...) whose props
    include ``props``, in document order."""
    return [
        node["props"]
        for node in nodes(component)
        if (kind is None or node["type"] == kind)
        and all(node["props"].get(k) == v for k, v in props.items())
    ]


def text(component: Any) -> str:
    """The text a browser shows for ``component``: every string and number in it, in order."""

    def walk(node: Any) -> str:
        if isinstance(node, list):
            return "".join(walk(child) for child in node)
        if isinstance(node, dict) and "props" in node:
            return walk(node["props"].get("children"))
        if isinstance(node, str | int | float) and not isinstance(node, bool):
            return str(node)
        return ""

    return walk(tree(component))


def rows(component: Any) -> list[list[str]]:
    """A table's body rows, each as the text of its cells."""
    bodies = [n for n in nodes(component) if n["type"] == "Tbody"]
    if not bodies:
        return []
    return [
        [text(cell) for cell in row["props"]["children"]] for row in bodies[0]["props"]["children"]
    ]


def header(component: Any) -> list[str]:
    """A table's column titles."""
    return [text(node) for node in nodes(component) if node["type"] == "Th"]
