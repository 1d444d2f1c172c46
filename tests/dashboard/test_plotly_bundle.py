"""The plotly.js the dashboard serves: the official cartesian bundle, unchanged, of the
version Dash's graphs are built against, and drawing every trace type the dashboard's
figures use."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import plotly.graph_objects as go
from plotly.basedatatypes import BaseTraceType
from plotly.offline import get_plotlyjs_version

from normwatch.dashboard import vendor

DASHBOARD = Path(vendor.__file__).resolve().parent.parent
BUNDLE = Path(vendor.__file__).resolve().parent / vendor.BUNDLE


def test_the_bundle_is_the_released_file_of_dashs_plotly_version() -> None:
    content = BUNDLE.read_bytes()
    assert vendor.__version__ == get_plotlyjs_version()
    assert content.startswith(
        f"/**\n* plotly.js (cartesian - minified) v{vendor.__version__}\n".encode()
    )
    assert hashlib.sha256(content).hexdigest() == vendor.SHA256
    assert "MIT License" in (BUNDLE.parent / "LICENSE").read_text()


def trace_types_in_figures() -> set[str]:
    """Every plotly trace type named in the dashboard's source: ``"type": "heatmap"`` in a
    figure dict, or a ``go.Heatmap(...)``."""
    classes = (getattr(go, name) for name in go.__all__)
    known = {
        cls.__name__.lower()
        for cls in classes
        if isinstance(cls, type) and issubclass(cls, BaseTraceType)
    }
    assert {"scatter", "scattergl", "heatmap", "bar", "sankey"} <= known
    named: set[str] = set()
    for source in DASHBOARD.rglob("*.py"):
        text = source.read_text()
        named |= {t for t in re.findall(r"[\"']type[\"']: [\"'](\w+)[\"']", text) if t in known}
        named |= {t.lower() for t in re.findall(r"\bgo\.(\w+)\(", text) if t.lower() in known}
    return named


def test_every_trace_type_the_dashboard_draws_is_in_the_bundle() -> None:
    named = trace_types_in_figures()
    assert named == {"bar", "heatmap", "scatter"}
    assert named <= vendor.TRACE_TYPES
