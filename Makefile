# First Makefile (store/CI engineer): replace freely. Targets: venv install test demo bench.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv install test test-fast demo bench

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

demo: install
	$(PY) manage.py demo

bench: install
	@echo "bench: no benchmarks yet (benchmarks/)"
