# Holdfast: `make run` starts everything on SQLite; `make test` runs every suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install browser run test lint clean drill bench docs docs-states docs-screenshots mutate

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet ".[test,docs]"
	touch $(STAMP)

install: $(STAMP)

# `make bench` also installs the bench extra (DBOS Transact, goal 2's anchor; locust, goal 7's
# load): without it those goals print "not measured".
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet ".[test,docs,bench]"
	touch $(BENCH_STAMP)

# The browser suite drives Debian's Chromium (Playwright cannot download a browser here).
# Without it, and without the rights to install it, that suite skips with the reason.
CHROMIUM := /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || apt-get install -y chromium || \
		(apt-get update && apt-get install -y chromium) || \
		echo "Could not install chromium: the browser suite will be skipped."

run: install
	$(PY) -m config.run_stack

# Failure drills against the running `make run` stack (start it first, in another terminal).
HOLDFAST_PORT ?= 8000
ORDER_SYSTEM_PORT ?= 8100
drill: install
	ORDER_SYSTEM_URL=http://127.0.0.1:$(ORDER_SYSTEM_PORT) $(PY) manage.py drill \
		--holdfast-url http://127.0.0.1:$(HOLDFAST_PORT)/ $(DRILL_ARGS)

# Measurements on PostgreSQL, in a bench_* database it writes to (manage.py bench_hot_paths,
# lab/bench/). DEBUG off: Django's query log would slow the measured paths.
bench: $(BENCH_STAMP)
	DEBUG=0 DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/bench_holdfast} \
		sh -c '$(PY) -m lab.bench.database "$$DATABASE_URL" && \
		$(PY) manage.py migrate --no-input -v 0 && $(PY) manage.py bench_hot_paths $(BENCH_ARGS)'

# Mutation testing of the safety core (lab/mutation/): each curated mutation is applied to a
# temporary copy of the tree and run against the tests that name its code, on SQLite. Every
# one must be killed; not part of `make test`. MUTATE_ARGS: names to run, --list, --baseline.
mutate: install
	$(PY) -m lab.mutation $(MUTATE_ARGS)

test: install browser
	$(PY) tests/run_suites.py $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	DJANGO_SETTINGS_MODULE=orders.settings $(PY) -m django makemigrations orders --check --dry-run
	$(VENV)/bin/lint-imports
	$(PY) -m mypy cases approvals reconciliation config lab tests/support
	$(PY) -m mypy --config-file orders/mypy.ini orders

# The docs (mkdocs-material), built offline and strictly (a broken link or a missing screenshot
# fails) into var/site/. docs-states regenerates the state picture from the state machine;
# docs-screenshots retakes the role guides' screenshots with the browser suite.
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

docs-states: install
	$(PY) -m config.statedoc

docs-screenshots: install browser
	DOCS_SCREENSHOTS=1 $(PY) -m pytest tests/browser/test_role_pages.py tests/browser/test_kinds_browser.py -q -p no:schemathesis

clean:
	rm -rf var build *.egg-info
