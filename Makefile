# Set-up on a fresh machine needs only python3:  make demo  (the product on real data)  and  make test.
# Targets: venv install test test-fast demo bench bench-full help.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv install test test-fast demo demo-local bench bench-full bench-peers browser

help:
	@echo "make demo   - venv + install, migrate a SQLite DB, load the Philly cluster, users per team,"
	@echo "              serve http://127.0.0.1:8000 and replay the Philly trace fast (Ctrl-C stops)"
	@echo "make demo-local - the product for real: web, cycle and LOCAL_AGENTS (2) node agents running the"
	@echo "              jobs' commands on this machine (db-local.sqlite3); prints how to submit"
	@echo "make test   - venv + install, run the test suite (pytest)"
	@echo "make bench  - every benchmark in quick mode (benchmarks/run.py --quick, under 3 minutes)"
	@echo "make bench-full - every benchmark with the settings of benchmarks/RESULTS.md (long)"
	@echo "make bench-peers - Helios, Slurm and FGD side by side (PEERS_ARGS=--full; skips a peer that is missing)"
	@echo "make browser - Debian's Chromium for the browser tests (apt-get, only when /usr/bin/chromium is missing)"
	@echo "Variables: DEMO_ARGS='--speed 1200 --port 8001', DEMO_DB=sqlite:///path.sqlite3"

venv: $(PY)
$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(STAMP)
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not services and not slow"

# The demo is the embedded default: SQLite (DEMO_DB) and the in-process loop (no broker, REDIS_URL empty),
# whatever DATABASE_URL / REDIS_URL the shell has. Options: $(PY) manage.py demo --help.
DEMO_DB ?= sqlite:///$(CURDIR)/db.sqlite3
DEMO_ARGS ?=
demo: install
	DATABASE_URL='$(DEMO_DB)' REDIS_URL= $(PY) manage.py demo $(DEMO_ARGS)

# Local mode: the product for real on this machine (web, cycle and LOCAL_AGENTS node agents that run the
# jobs' commands as processes), on its own SQLite file. `make demo-local LOCAL_AGENTS=3`.
DEMO_LOCAL_DB ?= sqlite:///$(CURDIR)/db-local.sqlite3
LOCAL_AGENTS ?= 2
demo-local: install
	DATABASE_URL='$(DEMO_LOCAL_DB)' REDIS_URL= $(PY) manage.py demo --local-agents $(LOCAL_AGENTS) $(DEMO_ARGS)

# Benchmarks (benchmarks/RESULTS.md): quick = CI settings, under 3 minutes; full = the recorded figures.
# The optional `bench` extra brings OR-Tools (optimum_gap); PostgreSQL parts skip when no server answers.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml | $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: install $(BENCH_STAMP)
	$(PY) benchmarks/run.py --quick

bench-full: install $(BENCH_STAMP)
	$(PY) benchmarks/run.py --full

# Peers side by side (Helios, Slurm, FGD; benchmarks/peers/run.py): each says what it needs (Debian
# packages, fetched sources, PEERS_WORK) and is skipped with that message when it is missing.
PEERS_ARGS ?=
bench-peers: install
	$(PY) benchmarks/peers/run.py $(PEERS_ARGS)

# Browser tests (tests/frontend/test_browser.py, marker `browser`) drive the system's Chromium through
# Playwright's Python package (the dev extra); `playwright install` is never used. .ci/run calls this.
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	@/usr/bin/chromium --version 2>/dev/null | head -1
