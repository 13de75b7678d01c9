# rackform — the two commands a newcomer needs:
#   make demo   the embedded `lab` site on this machine: its site mirror built from source,
#               the lab up, deployed (a real Kubernetes cluster) and verified
#   make test   the whole test suite
# Both install what they need on a fresh Debian machine (apt packages and a venv).

SHELL := /bin/bash
VENV := .venv
# Python 3.12 or newer: ansible-core 2.20 and later run on nothing older (Debian 12's python3
# is 3.11). The first new enough of python3, python3.14 .. python3.12 and pyenv's versions;
# or name one: make PYTHON=/path/to/python3.12
PYTHON_CANDIDATES := python3 python3.14 python3.13 python3.12 $(sort $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3))
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach candidate,$(PYTHON_CANDIDATES),$(shell $(candidate) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && echo $(candidate))))
endif
STAMP := $(VENV)/.installed
# The Helm client the platform stage runs (from PATH), built from sources/helm/ like the mirror's binaries.
HELM := $(VENV)/bin/helm
# promtool, which checks and unit-tests the alert rules (tests/unit/test_alerts.py), built from sources/prometheus/.
PROMTOOL := $(VENV)/bin/promtool
# The Pulumi engine (`pulumi up -s <site>`): its CLI and Python host built from sources/pulumi*/ (docs/pulumi.md).
PULUMI := $(VENV)/bin/pulumi
# Debian packages the tool and its tests use (installed when missing; needs root or sudo).
# The lab (tests/lab, make demo) needs systemd-nspawn and debootstrap; its BMCs
# are OpenIPMI's ipmi_sim, checked with ipmitool and FreeIPMI's ipmipower. The ssh-keys
# tests scan and log in to real sshd processes (openssh-server; its service is not needed).
# The site mirror: umoci builds the bundle's OCI images, skopeo pushes them to the mirror's registry,
# gcc and libc6-dev build the static pause binary, docker-registry and curl stand in for an
# upstream registry in the tests; gnupg signs each site's copy of the apt repository. Kubernetes
# itself is built with Go (>= 1.26: the machine's own, or one the `go` target fetches from the
# Go module proxy).
APT_PACKAGES := git openssh-client openssh-server iproute2 systemd-container debootstrap openipmi ipmitool freeipmi-tools skopeo umoci gcc libc6-dev docker-registry curl gnupg
SITE ?= lab

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: install apt go tools promtool pulumi demo test test-fast bench clean lock

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# The locks, all with sha256 hashes (docs/install.md): requirements.lock what the rackform CLI
# needs, requirements-pulumi.lock the pulumi extra, requirements-dev.lock the lab extra and the
# test and lint tools; requirements-collections.lock pins the ansible wheel the two collections
# the roles use are copied from (rackform/external_collections.py), not the whole package.
LOCKS := requirements.lock requirements-pulumi.lock requirements-dev.lock

$(STAMP): pyproject.toml $(LOCKS) requirements-collections.lock rackform/external_collections.py templates/project/requirements.yml.j2
	@[ -n "$(PYTHON)" ] || { echo "Python 3.12 or newer is needed (ansible-core 2.20 and later); none found: install one, or make PYTHON=/path/to/python3"; exit 1; }
	@# A venv of an older Python (3.11, before ansible-core 2.20) is made anew.
	@if [ -x $(VENV)/bin/python ] && ! $(VENV)/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	@# The whole ansible package was a dependency before: a venv made then sheds its 437 MB.
	@if $(VENV)/bin/pip show -q ansible 2>/dev/null; then $(VENV)/bin/pip uninstall -q -y ansible; fi
	@# --require-hashes: every distribution pinned, and refused unless its sha256 is the lock's.
	$(VENV)/bin/pip install -q --require-hashes $(addprefix -r ,$(LOCKS))
	@# rackform itself, editable: no dependencies of its own (the locks hold them), built with the
	@# locked setuptools rather than one fetched unhashed into an isolated build environment.
	$(VENV)/bin/pip install -q --no-deps --no-build-isolation -e .
	$(VENV)/bin/pip check
	$(VENV)/bin/python -m rackform.external_collections --install
	touch $@

# Re-resolve the dependencies (the newest versions pyproject.toml allows) with pip-compile into
# the four locks, with hashes, each compiled against the ones before it (a package two share has
# one version); review the diff, update templates/project/requirements.yml.j2 if the ansible
# release moved, run `make test`, commit them.
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile -q --upgrade --generate-hashes \
	--allow-unsafe --strip-extras --no-emit-find-links --no-emit-index-url
lock: $(STAMP)
	$(PIP_COMPILE) -o requirements.lock pyproject.toml
	$(PIP_COMPILE) --extra pulumi -c requirements.lock -o requirements-pulumi.lock pyproject.toml
	$(PIP_COMPILE) --extra lab --extra dev -c requirements.lock -c requirements-pulumi.lock -o requirements-dev.lock pyproject.toml
	$(VENV)/bin/python -m rackform.external_collections --requirement \
	  | $(PIP_COMPILE) -c requirements.lock -o requirements-collections.lock -

# Building from source (the site mirror, helm, promtool, the Pulumi engine) needs Go 1.26 or newer.
# A machine without it (Debian 12 packages Go 1.19) gets one from the Go module proxy itself: Debian's
# go downloads Go's own toolchain module (golang.org/toolchain, checked against the checksum
# database), kept in /var/lib/rackform/go/, and the venv's bin gets a link to its go, which rackform
# finds there first (rackform.installed_tools) and make puts first on PATH.
GO_TOOLCHAIN := go1.26.8
GO_TOOLCHAINS := /var/lib/rackform/go
go: $(STAMP)
	@if go version 2>/dev/null | awk '{split($$3, v, "."); exit !(v[1] == "go1" && v[2] + 0 >= 26)}'; then exit 0; fi; \
	dir=$(GO_TOOLCHAINS)/$(GO_TOOLCHAIN); \
	if [ ! -x $$dir/bin/go ]; then \
	  echo "Go 1.26 or newer is not on this machine: fetching $(GO_TOOLCHAIN) from the Go module proxy"; \
	  [ -x /usr/bin/go ] || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); $$SUDO apt-get install -y -qq golang-go; }; \
	  module=golang.org/toolchain@v0.0.1-$(GO_TOOLCHAIN).linux-$$(dpkg --print-architecture); \
	  fetched=$$(cd /tmp && GOFLAGS=-modcacherw GOPATH=$(GO_TOOLCHAINS)/gopath /usr/bin/go mod download -json $$module \
	    | $(CURDIR)/$(VENV)/bin/python -c 'import json, sys; print(json.load(sys.stdin)["Dir"])') || exit 1; \
	  chmod +x $$fetched/bin/* $$fetched/pkg/tool/*/*; \
	  ln -sfn $$fetched $$dir; \
	fi; \
	ln -sf $$dir/bin/go $(VENV)/bin/go; \
	echo "$(VENV)/bin/go: $$($(VENV)/bin/go version)"

# helm, built from its Go module (sources/helm/<version>/) into the mirror's Go build cache
# (/var/lib/rackform/mirror/cache/go, once per version and inputs) and copied into the venv.
tools: $(HELM)

$(HELM): $(STAMP) rackform/mirror/tools.py $(wildcard sources/helm/*/go.mod sources/helm/*/go.sum) | go
	$(VENV)/bin/python -m rackform.mirror.tools --install $@

# The Pulumi CLI, its Python language host and the SDK's two launcher scripts, built once per
# version and inputs into the Go build cache (about 13 CPU-minutes the first time) and copied into the venv.
pulumi: $(PULUMI)

$(PULUMI): $(STAMP) rackform/mirror/pulumi_engine.py $(wildcard sources/pulumi*/*/go.mod sources/pulumi*/*/go.sum) | go
	$(VENV)/bin/python -m rackform.mirror.pulumi_engine --install $(VENV)/bin

install: apt go $(STAMP) tools pulumi

# promtool (Prometheus 3.16.0) the same way: built once into the Go build cache, linked into the venv.
promtool: $(PROMTOOL)

$(PROMTOOL): $(STAMP) rackform/k8s/promtool.py $(wildcard sources/prometheus/*/go.mod sources/prometheus/*/go.sum) | go
	$(VENV)/bin/python -m rackform.k8s.promtool --link $@

# The main job: bring the embedded site up as a lab on this machine (root), deploy
# it, verify it, and leave it running. A second `make demo` converges with no changes.
demo: install
	rackform validate $(SITE)
	rackform diagram $(SITE)
	rackform mirror build $(SITE)
	rackform lab up $(SITE)
	rackform deploy $(SITE)
	rackform verify $(SITE)
	@echo
	rackform lab status $(SITE)
	@echo
	@echo "The $(SITE) lab is up and deployed. Reach a host at its address above:"
	@echo "  ssh -i /var/lib/rackform/labs/$(SITE)/ssh/id_ed25519 root@ADDRESS"
	@echo "Rack elevations: build/$(SITE)/diagrams/   the emitted Ansible project: build/$(SITE)/"
	@echo "Stop it with:  .venv/bin/rackform lab down $(SITE)"

# Unit tests in parallel; then the lab suite in one process (its module-scoped labs
# must not be split across xdist workers; the first run builds the lab's Debian base image).
# The lab run lists its 15 slowest tests, to keep the suite lean.
test: install promtool
	pytest -n 2 -q -m "not lab"
	pytest -p no:xdist -q -m lab --durations=15 tests/lab

test-fast: install promtool
	pytest -n 2 -q -m "not slow and not lab"

bench: install
	python bench/bench_scale.py

clean:
	rm -rf build .pytest_cache
