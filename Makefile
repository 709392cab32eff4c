# Two entry points for a fresh Debian machine (as root): `make plan` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLAN_DIR ?= build/plan
# Real consumers of what the stack renders: promtool/amtool judge rules and routing, a live Prometheus,
# Alertmanager and VictoriaMetrics deliver an alert and keep the cold tier, Slurm's
# daemons (with slurmdbd on MariaDB and munge) judge slurm.conf, gres.conf and the QoS set.
APT_TEST_PACKAGES := prometheus prometheus-alertmanager victoria-metrics slurmctld slurmd slurm-client slurmdbd munge mariadb-server systemd

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

# Debian's packages start no services here; the tests start and stop the daemons they need.
.apt-test-packages: Makefile
	@dpkg -s $(APT_TEST_PACKAGES) >/dev/null 2>&1 || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_TEST_PACKAGES); }
	touch $@

plan: $(VENV)/.installed-base
	$(BIN)/gpuctl plan --stack prod --out $(PLAN_DIR)

test: $(VENV)/.installed-test .apt-test-packages
	$(BIN)/ruff check .
	$(BIN)/lint-imports  # the layering contracts in .importlinter
	$(BIN)/mypy
	$(BIN)/mypy --strict policy/*.py  # the pack's modules are top-level names, as the CLI loads them
	$(BIN)/pytest

bench: $(VENV)/.installed-base
	$(BIN)/python benchmarks/plan_bench.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .apt-test-packages
