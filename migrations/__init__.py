"""Alembic environment and revisions for the normwatch schema."""
