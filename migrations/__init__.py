"""Alembic environment and revisions for the normwatch schema.

Imported as ``normwatch.migrations`` (this folder is mapped onto that name by ``package-dir``
in pyproject.toml).
"""
