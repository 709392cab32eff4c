# Two entry points for a fresh Debian machine (as root): `make plan` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLAN_DIR ?= build/plan

.PHONY: plan test bench clean

# Debian's python3 makes venvs only with python3-venv installed: install it on the first failure.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV) && apt-get update && \
		apt-get install -y --no-install-recommends python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed-base

plan: $(VENV)/.installed-base
	$(BIN)/gpuctl plan --stack prod --out $(PLAN_DIR)

test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

bench: $(VENV)/.installed-base
	$(BIN)/python benchmarks/plan_bench.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache
