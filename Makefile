# make demo — serve a live simulated run on http://127.0.0.1:8000 (SQLite)
# make test — the whole suite against Postgres (NORMWATCH_TEST_DATABASE_URL)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export NORMWATCH_TEST_DATABASE_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test

.PHONY: demo test lint typecheck clean

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

demo: $(VENV)/.installed-demo
	$(PY) -m normwatch demo

test: $(VENV)/.installed
	./scripts/ensure-postgres
	$(PY) -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(PY) scripts/typecheck

clean:
	rm -rf $(VENV) *.egg-info normwatch-demo.db* test-artifacts
