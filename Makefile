# Holdfast: `make run` starts everything on SQLite; `make test` runs every suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet ".[test]"
	touch $(STAMP)

install: $(STAMP)

run: install
	$(PY) -m config.run_stack

test: install
	$(PY) tests/run_suites.py $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	DJANGO_SETTINGS_MODULE=orders.settings $(PY) -m django makemigrations orders --check --dry-run

clean:
	rm -rf var build *.egg-info
