"""`scripts/docs-figures` as a module: the passages of the docs that quote figures, the
check that compares them with what was measured, and the example's figures."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docs-figures"


def docs_figures() -> ModuleType:
    """The script loaded as a module (it has no ``.py`` suffix to import it by)."""
    loader = importlib.machinery.SourceFileLoader("docs_figures", str(SCRIPT))
    spec = importlib.util.spec_from_loader("docs_figures", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_figures"] = module  # its dataclasses look their module up there
    try:
        loader.exec_module(module)
    finally:
        del sys.modules["docs_figures"]
    return module
