"""The normwatch ingest and query service.

Layers, lowest first: ``config`` → ``db`` → ``models`` → ``storage``/``auth`` →
``services`` → ``api`` → ``app`` (the factory). A module imports only from layers
below its own.
"""

from __future__ import annotations

from .config import Settings

__all__ = ["Settings"]
