# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
RUNSTAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed
PERFSTAMP := $(VENV)/.installed-perf
RELEASESTAMP := $(VENV)/.installed-release

.PHONY: run test test-long test-under-load e2e lint perf perf-quick perf-scheduler perf-scheduler-e2e fuzz soak clean image image-archive image-push tools release

# Every pip call made here (build isolation included: setuptools, wheel) installs the
# versions constraints.txt pins, for `make run` as for `make test`.
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Before installing: `extender`, the distribution's name before issue 36, and the server's
# distribution as installed before, whose older versions shipped the kubectl plugin's
# script too (replacing it after the plugin's install would remove that script).
UNINSTALL_OLD = $(BIN)/pip uninstall -q -y extender scheduling-extender >/dev/null 2>&1; rm -rf extender.egg-info

# `make run`: what serving needs and nothing else (no test, perf or release extras). The
# kubectl plugin (./plugin, a dependency of the server's distribution) from this checkout.
$(RUNSTAMP): $(BIN)/python pyproject.toml plugin/pyproject.toml constraints.txt
	$(UNINSTALL_OLD)
	$(BIN)/pip install -q -e ./plugin -e .
	touch $(RUNSTAMP)

$(STAMP): $(BIN)/python pyproject.toml plugin/pyproject.toml constraints.txt
	$(UNINSTALL_OLD)
	$(BIN)/pip install -q -e ./plugin -e '.[test]'
	touch $(STAMP) $(RUNSTAMP)

$(PERFSTAMP): $(STAMP)
	$(BIN)/pip install -q -e ./plugin -e '.[test,perf]'
	touch $(PERFSTAMP)

$(RELEASESTAMP): $(STAMP)
	$(BIN)/pip install -q -e ./plugin -e '.[test,release]'
	touch $(RELEASESTAMP)

# `make run` is a demo: without a state flag in ARGS it names the bundled example
# explicitly (serve refuses the implicit default in a container).
STATE_FLAGS := --cluster% --kubeconfig% --in-cluster% --config%
run: $(RUNSTAMP)
	$(BIN)/extender serve $(if $(filter $(STATE_FLAGS),$(ARGS))$(EXTENDER_CLUSTER)$(EXTENDER_KUBECONFIG)$(EXTENDER_IN_CLUSTER)$(EXTENDER_CONFIG),,--cluster extender/data/cluster.yaml) $(ARGS)

# Outside tools the deploy tests use (prometheus, promtool, kubectl, helm): installed
# when run as root; otherwise those tests fail naming what is missing.
tools:
	@if [ "$$(id -u)" = 0 ]; then .ci/install-tools; else .ci/install-tools || true; fi

# ---- the real control plane for tests/e2e ------------------------------------------------
# KUBE_SCHEDULER_BINARY (v1.30.6), KUBE_SCHEDULER_V1_36_BINARY, KUBE_APISERVER_V1_30_BINARY,
# KUBE_APISERVER_V1_36_BINARY: an exported path wins; else .ci/kube-scheduler and
# .ci/kube-apiserver unpack them into build/ from CI's archives (where: those scripts;
# or $$CONTROL_PLANE_ARCHIVES), sha256-checked. etcd comes from PATH (Debian etcd-server: .ci/install-tools). A missing
# binary is reported here, with where it was looked for and how to get it, and the
# end-to-end tests that need it fail naming it: none skips (tests/e2e/README.md).
WITH_SCHEDULER = eval "$$($(PYTHON) .ci/kube-scheduler --env; $(PYTHON) .ci/kube-apiserver --env)";

# The cel-go oracle for the CEL differential test (tests/cel/test_cel_oracle.py):
# $$CEL_ORACLE_BINARY, else the one .ci/cel-oracle builds once from the vendored sources
# (cached under build/cel-oracle/); without it that test fails, saying how to build it.
WITH_CEL_ORACLE = CEL_ORACLE_BINARY="$${CEL_ORACLE_BINARY:-$$($(PYTHON) .ci/cel-oracle)}"

# pytest-xdist: TEST_WORKERS processes (the end-to-end and server tests wait on child
# processes and sockets much of the time, hence more workers than cores);
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 4
XDIST = -n $(TEST_WORKERS) --dist loadgroup

test: $(STAMP) tools
	$(BIN)/ruff check extender tests perf testing plugin
	$(WITH_SCHEDULER) $(WITH_CEL_ORACLE) $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The full-size runs of tests that `make test` runs smaller (pytest marker `long`): the
# 5,000-body fuzz slice, the 5,000-expression CEL differential (cel-cpp), 3,000 generated
# expressions against cel-go, 50,000 CEL programs through the cache, the 9 MB YAML
# reloads, the 2,000-pod spread simulation, and each fault scenario of
# tests/e2e/test_faults.py ten times at 180 pods, two at a time (two xdist groups)
# (docs/design/layout.md#running-the-tests). CI (.ci/run) runs it after `make test`.
test-long: $(STAMP) tools
	$(WITH_SCHEDULER) $(WITH_CEL_ORACLE) $(BIN)/python -m pytest -m long $(XDIST) $(PYTEST_ARGS)

# `make test` with every core kept busy by another process: LOAD_PROCESSES (default: one
# per core) `python -c 'while 1: pass'` spinners, started first and killed when the run
# ends, however it ends. No verdict may rest on the machine's speed (docs/design/layout.md,
# "Running the tests"); this is the check. LOAD_TARGET=test-long runs that one instead.
LOAD_PROCESSES ?= $(shell nproc)
LOAD_TARGET ?= test
test-under-load: $(STAMP) tools
	@pids=""; for i in $$(seq $(LOAD_PROCESSES)); do python3 -c 'while 1: pass' & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	echo "test-under-load: $(LOAD_PROCESSES) spinning processes ($$pids) while make $(LOAD_TARGET) runs"; \
	$(MAKE) $(LOAD_TARGET)

# The end-to-end suite alone: the real kube-scheduler and `extender serve`, against the API
# double and against real control planes (kube-apiserver + etcd, v1.30 and v1.36).
e2e: $(STAMP) tools
	$(WITH_SCHEDULER) $(BIN)/python -m pytest tests/e2e $(XDIST) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check extender tests perf testing plugin

perf: $(PERFSTAMP)
	$(WITH_SCHEDULER) $(BIN)/python -m perf run --full

perf-quick: $(PERFSTAMP)
	$(WITH_SCHEDULER) $(BIN)/python -m perf run --quick

# Nightly-style hostile-input run (a 1,000-body slice runs in `make test`, 5,000 in
# `make test-long`).
FUZZ_BODIES ?= 100000
fuzz: $(STAMP)
	$(BIN)/python tests/hardening/fuzzer.py --bodies $(FUZZ_BODIES) $(FUZZ_ARGS)

# Long run at a steady rate with state churn; not part of `make test`.
SOAK_MINUTES ?= 30
soak: $(PERFSTAMP)
	$(BIN)/python -m perf.soak --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# Bursts (20 x 1,000, hard zone + hostname spread) through the real kube-scheduler, with
# and without the extender's in-flight accounting, checked against the truth.
perf-scheduler: $(PERFSTAMP)
	$(WITH_SCHEDULER) $(BIN)/python -m perf.scheduler_bursts

# The five scheduler_perf-like workloads through the real kube-scheduler at 5,000 and
# 15,000 nodes, with the extender and with kube-scheduler's in-tree plugins, two runs of
# each alternated: the ratio, handler time, bytes on the wire and CPU per pod of both
# processes (`make perf` runs 5,000 nodes).
perf-scheduler-e2e: $(PERFSTAMP)
	$(WITH_SCHEDULER) $(BIN)/python -m perf.scheduler_e2e

clean:
	rm -rf $(VENV) build *.egg-info perf/out

# Not part of `make test`: builds the container image with buildah from a local
# debootstrap base (see docs/operate/deploy.md, "The image"). Root only.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= localhost/scheduling-extender:$(VERSION)
IMAGE_ARCHIVE ?= build/scheduling-extender-$(VERSION).tar
BUILDAH := STORAGE_DRIVER=$${STORAGE_DRIVER:-vfs} buildah
image:
	IMAGE=$(IMAGE) .ci/build-image

# `make release VERSION=x.y.z`: a new version is cut first (.ci/cut-release: CHANGELOG.md's
# [Unreleased] becomes [x.y.z] - DATE, every file that states the version says x.y.z, a
# commit and the tag vx.y.z; nothing to do for the version already cut); then every
# versioned artifact of it in build/release/VERSION (image archive, chart, SBOM, wheels,
# checksums, notes from CHANGELOG.md); pushes nothing. RELEASE_IMAGE=0 leaves the image
# out (docs/operate/releasing.md). The image needs root.
RELEASE_IMAGE ?= 1
release: $(RELEASESTAMP) tools
	$(PYTHON) .ci/cut-release "$(VERSION)"
	VERSION=$(VERSION) RELEASE_IMAGE=$(RELEASE_IMAGE) IMAGE_REPO=$(IMAGE_REPO) PYTHON_BIN=$(BIN)/python .ci/release

# The built image as a docker-archive, for `kind load image-archive` (docs/operate/kind.md).
image-archive:
	mkdir -p $(dir $(IMAGE_ARCHIVE)) && rm -f $(IMAGE_ARCHIVE)
	$(BUILDAH) push $(IMAGE) docker-archive:$(IMAGE_ARCHIVE):$(IMAGE)

# The built image to your registry: make image-push IMAGE_REPO=REGISTRY/NAME (after
# `buildah login REGISTRY`); the tag is the version in pyproject.toml.
image-push:
	@test -n "$(IMAGE_REPO)" || { echo "make image-push: set IMAGE_REPO=REGISTRY/NAME" >&2; exit 2; }
	$(BUILDAH) push $(IMAGE) docker://$(IMAGE_REPO):$(VERSION)
