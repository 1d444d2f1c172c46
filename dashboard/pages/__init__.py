"""Dashboard pages.

Each module offers ``ROUTES``, ``match(path)``, ``layout(...)`` and ``register(app, data)``.
"""
