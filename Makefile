# numadra's task runner: one target per test tier, and the entry points CONTRIBUTING.md lists.
#
#   make venv          .venv with the package and its test extras (everything below uses it)
#   make lint          ruff check, ruff format --check, mypy --strict, lint-imports (layers)
#   make test          the README's test command, `python -m pytest -n auto`: every tier in one run
#   make coverage      line and branch coverage of driver/ and cdi/ over unit + integration
#                      (subprocesses included): a table here, HTML in build/coverage/html
#   make deploy        deploy/ rendered by kustomize and helm must agree; promtool checks the alerts
#   make unit          tests/unit: pure logic, generated host trees, no root needed
#   make integration   tests/integration: real sockets, gRPC, files, cgroups (root for cgroups)
#   make e2e           tests/e2e: real etcd + kube-apiserver + scheduler + controller-manager 1.37.2
#   make node          tests/node: real containerd 2.4 + kubelet 1.37.2 running pinned pods (root)
#   make vm            tests/vm: a QEMU VM with 3 NUMA nodes and a NIC on node 1; numadra discovers
#                      and pins on its real kernel (root, qemu-system-x86, debootstrap)
#   make image         the container image with podman, and its smoke test
#   make e2e-bins      build (or find cached) the Go binaries of the e2e tier; node-bins: the node tier's
#   make vm-image      build (or find cached) the VM tier's Debian guest (debootstrap, kernel, ext4 image)
#   make ci            what CI runs, on this machine as it is: .ci/run (the one CI definition) with
#                      NUMADRA_CI_INSTALL=0: no venv rebuild, no apt-get, the same steps
#   make bench         the prepare benchmark against the Go peer (JSON on stdout; never in CI)
#
# Variables: PYTHON (the interpreter that makes .venv), PYTEST_ARGS (added to every pytest run,
# e.g. PYTEST_ARGS="-x -k journal"). The skips of .ci/run hold here too: NUMADRA_SKIP_DEPLOY_TOOLS,
# NUMADRA_SKIP_E2E_BUILD, NUMADRA_SKIP_NODE_BUILD, NUMADRA_SKIP_IMAGE, NUMADRA_SKIP_VM_IMAGE set to
# 1 skip that build.

PYTHON ?= python3
VENV ?= .venv
PYTEST_ARGS ?=
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest $(PYTEST_ARGS)
LINTED := driver cdi harness tests bench

.PHONY: help venv lint fmt test coverage deploy unit integration image e2e-bins node-bins vm-image e2e node vm ci bench

help:
	@sed -n '3,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

venv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"

lint:
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache --no-logo

# rewrite in place what `lint` only checks (then read the diff)
fmt:
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

# the README's test command (CI runs it too, with a pinned seed: .ci/run)
test:
	$(PYTEST) -n auto

# coverage and pytest-cov come with the test extras; [tool.coverage.*] in pyproject.toml says what
# is measured (driver/, cdi/, the `numadra run` children too) and where the data and HTML go
coverage:
	$(PYTEST) --cov --cov-report=term-missing:skip-covered --cov-report=html tests/unit tests/integration

unit:
	$(PYTEST) tests/unit

integration:
	$(PYTEST) tests/integration

# A tool that cannot be built (no Go, no module proxy) is a warning and its tests skip, naming why;
# a difference between the kustomize and helm renderings, or an alert rule promtool refuses, fails.
deploy:
	@if [ "$${NUMADRA_SKIP_DEPLOY_TOOLS:-0}" = 1 ]; then \
	  echo "deploy: skipped by NUMADRA_SKIP_DEPLOY_TOOLS=1"; \
	elif bash scripts/build-deploy-tools.sh >/dev/null; then \
	  $(BIN)/python scripts/render_deploy.py; \
	else \
	  echo "::: WARNING: kustomize/helm/promtool could not be built (Go or module proxy missing); render tests skip"; \
	fi

# The Go binaries of the e2e and node tiers (cached outside the repo by a source stamp: cold
# ~30 and ~11 min on 2 cores, up to date in well under a second). A binary that cannot be built (no
# Go, no module proxy) is a warning, and the tests that need it skip, naming it.
e2e-bins:
	@if [ "$${NUMADRA_SKIP_E2E_BUILD:-0}" = 1 ]; then \
	  echo "e2e-bins: skipped by NUMADRA_SKIP_E2E_BUILD=1"; \
	elif ! timeout 3600 bash tests/e2e/build-bins.sh; then \
	  echo "::: WARNING: e2e binaries not built (Go module proxy unreachable?); the e2e tests skip"; \
	fi

# the node tier's kubelet comes from e2e-bins
node-bins:
	@if [ "$${NUMADRA_SKIP_NODE_BUILD:-0}" = 1 ]; then \
	  echo "node-bins: skipped by NUMADRA_SKIP_NODE_BUILD=1"; \
	elif ! timeout 1800 bash tests/node/build-bins.sh; then \
	  echo "::: WARNING: containerd/crictl not built (Go module proxy unreachable?); the node tests skip"; \
	fi

# The VM tier's guest (tests/vm/build-image.sh, cached outside the repo by a stamp: cold 6-8 min,
# up to date instantly). rc 3/4 = not root, debootstrap/mkfs.ext4 or the Debian mirror missing: a
# warning, and the VM tests skip naming it; any other failure fails.
vm-image:
	@if [ "$${NUMADRA_SKIP_VM_IMAGE:-0}" = 1 ]; then echo "vm-image: skipped by NUMADRA_SKIP_VM_IMAGE=1"; exit 0; fi; \
	rc=0; timeout 1500 bash tests/vm/build-image.sh || rc=$$?; \
	case "$$rc" in \
	  0) ;; \
	  3|4) echo "::: WARNING: VM guest image not built (root, debootstrap or a mirror unavailable, rc $$rc); the VM tests skip" ;; \
	  *) echo "::: VM guest image build FAILED (rc $$rc)"; exit "$$rc" ;; \
	esac

e2e: e2e-bins
	$(PYTEST) tests/e2e

node: e2e-bins node-bins
	$(PYTEST) tests/node

vm: vm-image
	$(PYTEST) tests/vm

# scripts/build-image.sh: rc 3 or 4 = podman/debootstrap or a mirror unavailable (a warning);
# any other failure (the build or its smoke test) fails
image:
	@if [ "$${NUMADRA_SKIP_IMAGE:-0}" = 1 ]; then echo "image: skipped by NUMADRA_SKIP_IMAGE=1"; exit 0; fi; \
	rc=0; timeout 1800 bash scripts/build-image.sh || rc=$$?; \
	case "$$rc" in \
	  0) ;; \
	  3|4) echo "::: WARNING: image not built (podman/debootstrap or a mirror unavailable, rc $$rc)" ;; \
	  *) echo "::: image build or smoke test FAILED (rc $$rc)"; exit "$$rc" ;; \
	esac

# One CI definition: .ci/run lists the steps; NUMADRA_CI_INSTALL=0 skips only its installs
ci:
	NUMADRA_CI_INSTALL=0 bash .ci/run

bench:
	$(BIN)/python bench/prepare.py
