"""The figures the docs quote from the demo and the llm.c log are what the product shows.

`scripts/docs-figures` serves the demo to its end and reads every quoted figure back through
the HTTP API; this runs its check, so a change that moves one of them (the simulator, an
analysis, a rule's evaluation) fails here until the docs say the new figure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_figure_the_docs_quote_from_the_demo_is_measured_and_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs-figures")],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "every quoted figure is what the demo shows" in done.stdout
    measured = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert len(measured) >= 20, done.stdout
