"""Dashboard pages.

Each page module offers ``ROUTES``, ``match(path)``, ``layout(data, who, query, ...)``, its
callbacks as plain functions of the viewer, the data and the inputs' values, and
``register(app, data)``, which wires those functions to Dash (:mod:`..routing`). Modules
without ``ROUTES`` hold a page's parts: pure builders and views.
"""
