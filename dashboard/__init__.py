"""The normwatch dashboard: Dash pages served by the same FastAPI app as the API.

Imported as ``normwatch.dashboard`` (this folder is mapped onto that name by ``package-dir``
in pyproject.toml).
"""

from __future__ import annotations

from .app import attach_dashboard

__all__ = ["attach_dashboard"]
