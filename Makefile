# Set-up on a fresh machine needs only python3:  make demo  (the product on real data)  and  make test.
# Targets: help venv install test test-fast demo demo-local demo-federation demo-slurm bench bench-full bench-peers browser slurm vendor-plotly.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv install test test-fast demo demo-local demo-federation demo-slurm bench bench-full bench-peers browser slurm vendor-plotly

help:
	@echo "make demo   - venv + install, migrate a SQLite DB, load the Philly cluster, users per team,"
	@echo "              serve http://127.0.0.1:8000 and replay the Philly trace fast (Ctrl-C stops)"
	@echo "make demo-local - the product for real: web, cycle and LOCAL_AGENTS (2) node agents running the"
	@echo "              jobs' commands on this machine (db-local.sqlite3); prints how to submit"
	@echo "make demo-federation - a federation manager (:8000) and FEDERATION_WORKERS (2) local-mode workers"
	@echo "              (:8001..), each its own database; prints how to submit to the manager"
	@echo "make test   - venv + install, run the test suite (pytest)"
	@echo "make test-fast - the tests that need no PostgreSQL / Redis / agents and are not slow"
	@echo "make bench  - every benchmark in quick mode (benchmarks/run.py --quick, under 3 minutes)"
	@echo "make bench-full - every benchmark with the settings of benchmarks/RESULTS.md (long)"
	@echo "make bench-peers - Helios, Slurm and FGD side by side (PEERS_ARGS=--full; skips a peer that is missing)"
	@echo "make browser - Debian's Chromium for the browser tests (apt-get, only when /usr/bin/chromium is missing)"
	@echo "make slurm  - Debian's munge slurmctld slurmd slurm-client (apt-get, only when one is missing)"
	@echo "make demo-slurm - the product over a private local Slurm of two nodes (needs root and make slurm)"
	@echo "make vendor-plotly - refresh frontend/static/vendor/plotly-strict.min.js to the installed plotly's plotly.js (npm)"
	@echo "Variables: DEMO_ARGS='--speed 1200 --port 8001', DEMO_DB=sqlite:///path.sqlite3"

# Both steps run under a lock on the venv (.ci/venv.py, standard library only): `make demo` and `make demo-local`
# started together wait for each other, and the one that waited uses the venv the other finished.
venv: $(PY)
$(PY):
	$(PYTHON) .ci/venv.py $(VENV)

install: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) .ci/venv.py $(VENV) $(STAMP) -- -m pip install -q -e '.[dev]'

# two pytest-xdist workers (TEST_WORKERS=0: one process), a test file's tests on one worker (--dist loadfile: a
# module's fixtures and order as in one process); each worker has its own test database and Redis database
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25

test-fast: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not services and not slow"

# The demo is the embedded default: SQLite (DEMO_DB) and the in-process loop (no broker, REDIS_URL empty),
# whatever DATABASE_URL / REDIS_URL the shell has (a production DATABASE_URL in the shell is never cleared by a
# demo); another database: DEMO_DB=... (the demo's messages name it: DEMO_DB_VARIABLE). Options: $(PY) manage.py demo --help.
# Every demo recipe `exec`s the demo: it is make's own child, with no shell in between, so make stopped alone stops
# it, its agents and their tasks: make passes its SIGTERM on to its child (to the shell only, before: the demo ran
# on under pid 1, new-user trial 26, F2); a demo started by make also stops when make dies (SIGKILL) or gets SIGINT
# or SIGHUP without passing it on (manage.py demo: follow_make). Ctrl-C reaches both, as before.
DEMO_DB ?= sqlite:///$(CURDIR)/db.sqlite3
DEMO_ARGS ?=
demo: install
	DATABASE_URL='$(DEMO_DB)' DEMO_DB_VARIABLE=DEMO_DB REDIS_URL= exec $(PY) manage.py demo $(DEMO_ARGS)

# Local mode: the product for real on this machine (web, cycle and LOCAL_AGENTS node agents that run the
# jobs' commands as processes), on its own SQLite file. `make demo-local LOCAL_AGENTS=3`.
DEMO_LOCAL_DB ?= sqlite:///$(CURDIR)/db-local.sqlite3
LOCAL_AGENTS ?= 2
demo-local: install
	DATABASE_URL='$(DEMO_LOCAL_DB)' DEMO_DB_VARIABLE=DEMO_LOCAL_DB REDIS_URL= exec $(PY) manage.py demo --local-agents $(LOCAL_AGENTS) $(DEMO_ARGS)

# Federation on loopback (docs/federation.md): a manager on 8000 (db-federation.sqlite3) and FEDERATION_WORKERS
# local-mode workers on 8001.. (each its own database under .demo-federation/).
DEMO_FEDERATION_DB ?= sqlite:///$(CURDIR)/db-federation.sqlite3
FEDERATION_WORKERS ?= 2
.PHONY: demo-federation
demo-federation: install
	DATABASE_URL='$(DEMO_FEDERATION_DB)' DEMO_DB_VARIABLE=DEMO_FEDERATION_DB REDIS_URL= exec $(PY) manage.py demo --federation $(FEDERATION_WORKERS) $(DEMO_ARGS)

# Benchmarks (benchmarks/RESULTS.md): quick = CI settings, under 3 minutes; full = the recorded figures.
# The optional `bench` extra brings OR-Tools (optimum_gap); PostgreSQL parts skip when no server answers.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml | $(STAMP)
	$(PYTHON) .ci/venv.py $(VENV) $(BENCH_STAMP) -- -m pip install -q -e '.[dev,bench]'

bench: install $(BENCH_STAMP)
	$(PY) benchmarks/run.py --quick

bench-full: install $(BENCH_STAMP)
	$(PY) benchmarks/run.py --full

# Peers side by side (Helios, Slurm, FGD; benchmarks/peers/run.py, set-up in ../shared/peers/README.md): each
# says what it needs (Debian packages, fetched sources, PEERS_WORK) and is skipped with that message when it is
# missing. Helios's and FGD's input converters need pandas in the virtualenv. PEERS_ARGS="--full" for each
# script's full input (all 1,213 openb nodes for FGD).
PEERS_ARGS ?=
bench-peers: install
	$(PY) -c "import pandas" 2>/dev/null || $(PY) -m pip install -q pandas
	$(PY) benchmarks/peers/run.py $(PEERS_ARGS)

# Browser tests (tests/frontend/test_browser.py, marker `browser`) drive the system's Chromium through
# Playwright's Python package (the dev extra); `playwright install` is never used. .ci/run calls this.
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	@/usr/bin/chromium --version 2>/dev/null | head -1

# Slurm for the Slurm backend's tests and demo (docs/slurm.md): the tests start their own private munged,
# slurmctld and slurmds (gpuplatform/slurm/local.py), so only the packages are needed. .ci/run calls this.
SLURM_BINARIES := /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch
slurm:
	@(for b in $(SLURM_BINARIES); do test -x $$b || exit 1; done) || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	   munge slurmctld slurmd slurm-client)

# The product over a private two-node Slurm on this machine (web, cycle, Slurm backend; db-slurm.sqlite3).
DEMO_SLURM_DB ?= sqlite:///$(CURDIR)/db-slurm.sqlite3
demo-slurm: install slurm
	DATABASE_URL='$(DEMO_SLURM_DB)' DEMO_DB_VARIABLE=DEMO_SLURM_DB REDIS_URL= exec $(PY) manage.py demo --slurm $(DEMO_ARGS)

# plotly.js's strict bundle (no eval: the Content-Security-Policy has no 'unsafe-eval') is committed under
# frontend/static/vendor/; after upgrading the plotly package, fetch the same plotly.js version's bundle.
# tests/frontend/test_pages.py fails while the two versions differ.
vendor-plotly: install
	@v=$$($(PY) -c "import plotly, pathlib, re; print(re.search(r'v(\d+\.\d+\.\d+)', (pathlib.Path(plotly.__file__).parent / 'package_data' / 'plotly.min.js').read_text()[:200]).group(1))"); \
	tmp=$$(mktemp -d); cd $$tmp && npm pack -q plotly.js-strict-dist-min@$$v >/dev/null && tar xzf plotly.js-strict-dist-min-$$v.tgz && \
	cp package/plotly-strict.min.js $(CURDIR)/frontend/static/vendor/plotly-strict.min.js && \
	cp package/LICENSE $(CURDIR)/frontend/static/vendor/plotly-strict.LICENSE && rm -rf $$tmp && echo "plotly.js strict $$v"
