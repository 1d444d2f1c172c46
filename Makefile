# make demo — serve a live simulated run on http://127.0.0.1:8000 (SQLite)
# make test — the whole suite against Postgres (NORMWATCH_TEST_DATABASE_URL)
# make test-fast — its unit and database tiers only: no server process, no browser (~1.5 min)
# make test-citus — tests/citus and the storage, alerting, API and end-to-end tests on Citus
#   (a local cluster, scripts/citus-cluster; its build needs CITUS_SOURCE, a citusdata/citus repository)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export NORMWATCH_TEST_DATABASE_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
# Test processes (pytest-xdist): one a core, at most four (each holds a few dozen Postgres
# connections: its own server processes and pools). WORKERS=0 runs in this process.
WORKERS ?= auto
PYTEST := $(PY) -m pytest -n $(WORKERS) --maxprocesses=4 --dist worksteal

.PHONY: demo test test-fast test-citus lint typecheck clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed (set PYTHON=...)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

# The demo needs only the server and dashboard extras: a lighter, faster first install.
$(VENV)/.installed-demo: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed (set PYTHON=...)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dashboard]'
	@touch $@

# DEMO_ARGS: more options of `normwatch demo`, e.g. "--keep --allow-webhook 127.0.0.1:9000".
demo: $(VENV)/.installed-demo
	$(PY) -m normwatch demo $(DEMO_ARGS)

test: $(VENV)/.installed
	./scripts/ensure-postgres
	$(PYTEST)

# Tiers (tests/conftest.py gives each test one): unit, db, e2e (a real server process),
# browser (Chromium); slow on top. Any other selection: $(PY) -m pytest -m "<expression>".
test-fast: $(VENV)/.installed
	./scripts/ensure-postgres
	$(PYTEST) -m "(unit or db) and not slow"

CITUS_TESTS := tests/citus tests/server/storage tests/server/alerts tests/server/workers \
	tests/server/services tests/server/api tests/server/aliases tests/server/analytics \
	tests/server/test_migrate.py tests/server/test_db.py tests/e2e

test-citus: $(VENV)/.installed
	./scripts/citus-cluster build
	./scripts/citus-cluster start
	NORMWATCH_TEST_DATABASE_URL=$$(./scripts/citus-cluster url) $(PY) -m pytest $(CITUS_TESTS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(PY) scripts/typecheck

clean:
	rm -rf $(VENV) *.egg-info normwatch-demo.db* test-artifacts
