# promoter — set-up, serve, test, lint and benchmarks.
# `make serve` and `make test` work on a fresh clone: each creates .venv and installs what
# it needs: `make serve` the package alone, `make test` (and the other targets) with the
# dev and docs extras.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
SERVE_STAMP := $(VENV)/.serve-stamp
STATE  ?= .promoter
HOST   ?= 127.0.0.1
PORT   ?= 8787
REPO   ?=
CONFIG ?=
BENCH  ?=
# a leading ~ of REPO is the home directory even where the shell left it as typed (zsh
# does for REPO=~/src/app)
REPO_PATH = $(patsubst ~/%,$(HOME)/%,$(patsubst ~,$(HOME),$(REPO)))
NAME   ?= $(if $(REPO),$(notdir $(abspath $(REPO_PATH))),demo)

.PHONY: help venv serve test test-sqlite test-postgres test-fast lint format bench demo schemas docs clean

help:
	@echo "make serve [REPO=/path/to/worktree]  run the daemon on $(HOST):$(PORT)"
	@echo "make serve CONFIG=promoter.toml      run it with an operator config (approval, checks...)"
	@echo "make test [JOBS=auto]                the whole suite, SQLite then PostgreSQL, in parallel"
	@echo "make test-fast                       the suite without the slow tests, SQLite only"
	@echo "make lint                            ruff + mypy --strict"
	@echo "make bench [BENCH=--full]            the speed table (ratios; --full adds the long ones)"
	@echo "make demo                            the whole flow on a scratch repository"
	@echo "make schemas                         regenerate schemas/ (JSON Schemas, openapi.json), the validator's"
	@echo "make docs                            build the documentation site into site/ (strict)"

# the package compiled after an editable install, also where the environment says not to
# write bytecode (PYTHONDONTWRITEBYTECODE): otherwise every `promoter` command a developer
# or CI runs compiles what it imports again (a fifth of `run --list`'s CPU), which a user's
# installed wheel never does; `make venv` again after a pull recompiles what changed
# the whole set: the package with the dev and docs extras (tests, lint, docs, bench)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,docs]'
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m compileall -q promoter
	@touch $(STAMP)

# what serving needs: the package alone (the whole set, when installed, has it already)
$(SERVE_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
		$(PYTHON) -m venv $(VENV) && $(PY) -m pip install --quiet -e .; fi
	@touch $(SERVE_STAMP)

venv: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m compileall -q promoter

# flags given on the command line win over CONFIG's settings; without CONFIG the defaults
SERVE_FLAGS = $(if $(CONFIG),--config $(CONFIG)) \
	$(if $(or $(filter command line,$(origin STATE)),$(if $(CONFIG),,1)),--state-dir $(STATE)) \
	$(if $(or $(filter command line,$(origin HOST)),$(if $(CONFIG),,1)),--host $(HOST)) \
	$(if $(or $(filter command line,$(origin PORT)),$(if $(CONFIG),,1)),--port $(PORT))

# the daemon migrates its database itself, and records itself for this user's CLI
# (~/.config/promoter/): `promoter run` then works from any guarded worktree. Bytecode
# caches are written even where the environment says not to (PYTHONDONTWRITEBYTECODE):
# without them every start compiles promoter's modules again (25 s to ready, not 1.5 s).
# PROMOTER_STARTED_BY=make: a taken port is then refused naming `make serve PORT=N`
SERVE_PY := env -u PYTHONDONTWRITEBYTECODE PROMOTER_STARTED_BY=make $(PY)
serve: $(SERVE_STAMP)
ifneq ($(REPO),)
	$(SERVE_PY) -m promoter.cli.main serve $(SERVE_FLAGS) --repo $(NAME)=$(REPO_PATH)
else ifneq ($(CONFIG),)
	$(SERVE_PY) -m promoter.cli.main serve $(SERVE_FLAGS)
else
	$(SERVE_PY) -m scripts.demo ensure-repo $(STATE)/demo-repo
	$(SERVE_PY) -m promoter.cli.main serve $(SERVE_FLAGS) --repo demo=$(STATE)/demo-repo
endif

PG_ADMIN ?= $(or $(PROMOTER_TEST_POSTGRES_URL),postgresql+psycopg://postgres@127.0.0.1:5432/postgres)
# test workers (pytest-xdist): `auto` is one per core; JOBS=0 runs in this process, serially;
# each pass ends with its fifteen slowest tests, to keep an eye on what the suite costs
# and with bytecode caches written even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): without them every worker, daemon and command the suite
# starts compiles what it imports, and assertion rewriting redoes every test module
JOBS   ?= auto
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -n $(JOBS) --durations=15

# the whole suite on SQLite, then again on PostgreSQL when a server answers at PG_ADMIN
test: $(STAMP)
	$(PYTEST)
	@if PROMOTER_TEST_POSTGRES_URL='$(PG_ADMIN)' $(PY) -m tests.support.databases; then \
		echo "PostgreSQL pass: the whole suite again, a database for each test that opens one"; \
		PROMOTER_TEST_POSTGRES_URL='$(PG_ADMIN)' PROMOTER_TEST_DATABASE=postgresql $(PYTEST); \
	else \
		echo "PostgreSQL pass skipped: no server answers at $(PG_ADMIN) (SQLite only)"; \
	fi

test-sqlite: $(STAMP)
	$(PYTEST)

test-postgres: $(STAMP)
	PROMOTER_TEST_POSTGRES_URL='$(PG_ADMIN)' PROMOTER_TEST_DATABASE=postgresql $(PYTEST)

# the inner loop: SQLite, without the long crash and load tests
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check promoter scripts tests bench migrations
	$(VENV)/bin/ruff format --check promoter scripts tests bench migrations
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix promoter scripts tests bench migrations
	$(VENV)/bin/ruff format promoter scripts tests bench migrations

schemas: $(STAMP)
	$(PY) -m promoter.domain.schemas schemas
	$(PY) -m promoter.domain.wirecheck_gen promoter/domain/wire_schemas.py
	$(PY) -m promoter.api.openapi_export schemas
	$(PY) -m scripts.answers

# the speed table, printed and written into docs/benchmarks.md (the last run only)
bench: $(STAMP)
	@mkdir -p build && rm -f build/bench.json
	$(PY) -m bench.run --json build/bench.json $(BENCH)
	$(PY) -m scripts.docs_bench build/bench.json docs/benchmarks.md

# the site from docs/ into site/; strict: a warning (a broken link or anchor) fails it
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -b html -n -W --keep-going -q -E -d build/doctrees docs site

demo: $(STAMP)
	$(PY) -m scripts.demo run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site build/doctrees
