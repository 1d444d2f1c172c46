"""What tests share, so that no test module imports another.

- `databases`: scratch Postgres databases and migrated SQLite files.
- `tenants`: a project of its own with a token of each scope.
- `principals`: callers of the services, on the test's session.
- `servers`: real server processes beyond `normwatch.testing` (alone on a database).
- `receivers`: the webhook receiver, configurable per request.
- `api`: runs, batches and alert rules over the HTTP API.
- `committed`: runs written and read through the services, each call committed.
- `prometheus`: a parsed ``/metrics`` scrape.
- `points`: every point a run stored, read straight from its tables.
- `series`: metric values the tests log (noisy series, the fault trainers' values).
- `m4_reference`: the brute-force M4 reference.
- `jax_norms`: the float64 reference of the JAX client's norms, and random trees for it.
- `jax_mesh`: the JAX client on an 8-device CPU mesh (a script run in its own process).
- `notifications`: alert notifications as the dispatcher hands them to the deliverer.
- `dns`: stand-ins for ``getaddrinfo``.
- `floats`: float comparisons that tell NaN and the signed zeros apart.
- `training_logs`: training logs as the importers read them, and what they hold.
- `coroutines`: a coroutine run to completion in a thread of its own.
- `docs_figures`: `scripts/docs-figures` as a module (the docs' quoted figures and their check).

Fixtures stay in the ``conftest.py`` files: ``tests/conftest.py`` for databases, servers,
tenants and the receiver; a package's own for what only its tests use.
"""
