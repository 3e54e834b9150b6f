# atwhois: one entry point. `make test` and `make run` set up everything they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)
# Python keeps what it compiled (__pycache__, ignored by git), and pytest its rewritten
# tests, even where the machine's environment says not to: without them every run, and
# every process a test starts, compiles the whole package again (6 s of each worker's
# collection here).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-offline lint docs docs-serve devnet bench soak fuzz mutate lock setup clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP)
	./scripts/setup-system.sh

## The main job: resolve and verify identities on the local test network.
run: setup
	$(PY) -m devnet.demo

## The tests: set-up, the test network (started by the suite), pytest. In another order:
## make test PYTEST_ARGS=--random-order (the seed it prints replays one). The files are
## shared among TEST_WORKERS processes (pytest-xdist), each with a test network of its own
## (a file's tests stay in one process: its fixtures are started once); then the tests
## marked `alone` (they measure time or load at a server) run by themselves. TEST_WORKERS=0
## runs everything in this one process.
TEST_WORKERS ?= 2
WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: setup
ifeq ($(TEST_WORKERS),0)
	$(PY) -m pytest $(PYTEST_ARGS)
else
	status=0; \
	$(PY) -m pytest $(WORKERS) -m "not alone" $(PYTEST_ARGS) || status=$$?; \
	$(PY) -m pytest -m alone $(PYTEST_ARGS) || status=$$?; \
	exit $$status
endif

## The tests that need no server (no test network, no Redis or PostgreSQL of theirs): the
## quick loop while editing; `make test` runs them too.
## Its tests start no shared fixture worth keeping a file together for: each worker takes
## the next test when it is free (`worksteal`), so one long file does not hold the end. One
## worker more than the cores: a fifth of its time is tests waiting (a poke gap, a deadline,
## a child process), which the third worker fills (34 s with two here, 30 s with three).
OFFLINE_WORKERS ?= 3
test-offline: setup
	$(PY) -m pytest -m "not network" $(if $(filter 0,$(OFFLINE_WORKERS)),,-n $(OFFLINE_WORKERS) --dist worksteal) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check atwhois devnet tests bench docs
	$(VENV)/bin/ruff format --check atwhois devnet tests bench docs
	$(VENV)/bin/mypy

## The manual: the site from docs/ into site/ (strict: a broken link or a page left out
## fails it), its references made from the code (docs/generate.py). Open site/index.html
## (navigation and search work from the files), or `make docs-serve` for a live preview.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict

## The test network in the foreground; prints how to point atwhois at it.
devnet: setup
	$(PY) -m devnet

## A long model-based run of the cache (20,000 steps for each store unless
## ATWHOIS_SOAK_STEPS says otherwise): prints how many steps it ran and what it found.
soak: setup
	ATWHOIS_SOAK_STEPS=$${ATWHOIS_SOAK_STEPS:-20000} $(PY) -m pytest -s -p no:cacheprovider tests/cache/test_cache_model.py

## Fuzz every parser that takes a stranger's bytes, 100,000 inputs per target unless
## FUZZ_EXAMPLES says otherwise; prints each target's count and any crash (exit 1 on one).
fuzz: setup
	$(PY) -m tests.support.fuzz --examples $${FUZZ_EXAMPLES:-100000}

## Mutation testing of the rules' modules (resolver/plc, verdict, handle, document, syntax,
## did, the cache's policy and worth, audit findings, DNSSEC, commits, service auth tokens;
## configured in pyproject.toml): prints the kill rate and the surviving mutants.
mutate: setup
	rm -rf mutants
	$(VENV)/bin/mutmut run --max-children 2 || true
	$(PY) -m tests.support.mutation_report

## The versions the image installs (requirements.lock), from pyproject.toml's dependencies
## and its `all` extra (the daemon's stack, Redis, PostgreSQL).
lock: $(STAMP)
	$(PY) -m pip install -q pip-tools
	$(VENV)/bin/pip-compile -q --extra all --strip-extras --no-header --no-emit-index-url \
		--no-emit-find-links --output-file requirements.lock pyproject.toml

bench: setup
	command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)
	$(PY) -m bench

clean:
	rm -rf $(VENV) mutants devnet/plc/node_modules
