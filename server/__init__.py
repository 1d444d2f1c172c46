"""The normwatch ingest and query service.

Imported as ``normwatch.server``: this folder is mapped onto that name by ``package-dir``
in pyproject.toml (ruff is told so by ``known-first-party``; mypy runs through
``scripts/typecheck``, which lays the package out as installed).

Layers, lowest first: ``config`` → ``db`` → ``models`` → ``storage``/``auth`` →
``services`` → ``api`` → ``app`` (the factory). A module imports only from layers
below its own.
"""

from __future__ import annotations

from .config import Settings

__all__ = ["Settings"]
