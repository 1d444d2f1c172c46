"""The normwatch dashboard: Dash pages served by the same FastAPI app as the API."""

from __future__ import annotations

from .app import attach_dashboard

__all__ = ["attach_dashboard"]
