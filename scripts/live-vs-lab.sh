#!/usr/bin/env bash
# Does the virtual-time lab rank routing configs the way a live run does? One workload, one fleet shape
# (2 × H100 + 2 × L4, crates/lab/inputs/fleet-live.yaml), three routers, measured twice:
#   live: epp-sim (real time) behind Envoy, driven by epp-bench, for each setup
#         round-robin  Envoy direct, ROUND_ROBIN over the 4 replicas (deploy/envoy/envoy-direct-pool.yaml)
#         random       Envoy full duplex + epp with crates/lab/inputs/configs/random.yaml (random-picker,
#                      no scorers)
#         default      Envoy full duplex + epp with its default profile (queue 2, KV 2, prefix 3)
#         predicted    Envoy full duplex + epp with config/predicted-latency.yaml (llm-d's routing-only
#                      predicted-latency guide config; epp's in-process predictor trains on the run's own
#                      completions and retrains every 10 s, so each run includes its warm-up). Not in the
#                      default SETUPS: SETUPS="default predicted" compares it with the default profile.
#   lab:  epp-bench lab on crates/lab/inputs/fleet-live.yaml + crates/lab/inputs/workload-live.yaml (the
#         file the live runs send too, via epp-bench --lab-workload) with the same three routers
#         (crates/lab/inputs/configs/random.yaml through epp's pipeline, the round-robin and default
#         baselines, config/predicted-latency.yaml with the lab's own predictor retrained at 10 s
#         virtual-time ticks)
# Each live run gets a fresh fleet, epp and Envoy, so no run inherits another's prefix caches, queues
# or epp state (a lab run starts cold too). Runs are interleaved by round (rr, random, default, rr, ...)
# so machine noise spreads over all setups, and the setups of one round send the same requests at the
# same times (same epp-bench seed). The lab does LAB_ROUNDS cold runs of the same length with other
# seeds. Both sides are summarised alike: TTFT and E2E p90 are the mean over rounds of each run's p90,
# throughput is completed requests over summed run time (first release to last response, as the lab's
# makespan). The rankings by TTFT p90, E2E p90 and throughput are printed side by side with a verdict;
# differences under TOLERANCE_LATENCY / TOLERANCE_THROUGHPUT count as ties. Results go to $OUT_DIR and,
# unless BENCHMARKS_MD is empty, into BENCHMARKS.md between the live-vs-lab markers.
#
#   usage: make live-vs-lab   (or scripts/live-vs-lab.sh after `cargo build --release --workspace --bins`,
#              make envoy)
#   env:   ROUNDS (3), DURATION (30: simulated seconds of arrivals per run), LAB_ROUNDS (40),
#          TIME_SCALE (1: epp-sim's --time-scale; rates, run length and epp's scrape interval are scaled
#          so the simulated workload stays the same, and live latencies are reported in simulated time),
#          SEED (1), SETUPS ("round-robin random default"), TOLERANCE_LATENCY (0.05),
#          TOLERANCE_THROUGHPUT (0.02), ENVOY_CONCURRENCY (1: Envoy's ROUND_ROBIN rotates per worker thread,
#          and two workers' rotations merge into runs of consecutive requests to one replica, which is not
#          the round robin the lab models), BASE_PORT (20000: uses +1..+4, +10..+12, +80, +99), OUT_DIR,
#          BENCHMARKS_MD, PROFILE (release), ENVOY_BIN, PREDICTED_CONFIG (config/predicted-latency.yaml: the
#          config the predicted setup runs, e.g. config/predicted-latency-epp.yaml), LATENCY_OBJECTIVE
#          (mean: the predictor's --latency-objective-type live and in the lab; log-mean for
#          config/predicted-latency-epp.yaml)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROFILE=${PROFILE:-release}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
BIN_DIR=$TARGET_DIR/$PROFILE
OUT_DIR=${OUT_DIR:-$TARGET_DIR/live-vs-lab}
BENCHMARKS_MD=${BENCHMARKS_MD-BENCHMARKS.md}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-30}
LAB_ROUNDS=${LAB_ROUNDS:-40}
ENVOY_CONCURRENCY=${ENVOY_CONCURRENCY:-1}
TIME_SCALE=${TIME_SCALE:-1}
SEED=${SEED:-1}
SETUPS=${SETUPS:-round-robin random default}
TOLERANCE_LATENCY=${TOLERANCE_LATENCY:-0.05}
TOLERANCE_THROUGHPUT=${TOLERANCE_THROUGHPUT:-0.02}
BASE_PORT=${BASE_PORT:-20000}

FLEET=crates/lab/inputs/fleet-live.yaml
LAB_WORKLOAD=crates/lab/inputs/workload-live.yaml
RANDOM_CONFIG=crates/lab/inputs/configs/random.yaml
PREDICTED_CONFIG=${PREDICTED_CONFIG:-config/predicted-latency.yaml}
LATENCY_OBJECTIVE=${LATENCY_OBJECTIVE:-mean}
[ -f "$PREDICTED_CONFIG" ] || { echo "live-vs-lab: PREDICTED_CONFIG $PREDICTED_CONFIG is not a file" >&2; exit 2; }
MODEL=meta-llama/Llama-3.1-8B-Instruct
PROFILES=h100-8b,h100-8b,l4-8b,l4-8b
# The live runs read the lab's own workload file (epp-bench converts its token units, see
# crates/bench/src/lab_workload.rs); rate, duration and seed are set per round below. Rate in simulated
# req/s (the file's).
RATE=10
LIVE_WORKLOAD=(--lab-workload "$LAB_WORKLOAD" --model "$MODEL")
SIM_PORTS=($((BASE_PORT + 1)) $((BASE_PORT + 2)) $((BASE_PORT + 3)) $((BASE_PORT + 4)))
EPP_PORT=$((BASE_PORT + 10))
EPP_METRICS_PORT=$((BASE_PORT + 12))
LISTEN_PORT=$((BASE_PORT + 80))
ADMIN_PORT=$((BASE_PORT + 99))

find_envoy() {
  if [ -n "${ENVOY_BIN:-}" ]; then echo "$ENVOY_BIN"; return; fi
  for candidate in .venv/lib/python*/site-packages/envoy/_bin/envoy .venv/bin/envoy; do
    if [ -x "$candidate" ]; then echo "$candidate"; return; fi
  done
  command -v envoy || true
}
ENVOY=$(find_envoy)
for tool in "$BIN_DIR/epp" "$BIN_DIR/epp-sim" "$BIN_DIR/epp-bench" "$ENVOY"; do
  [ -x "$tool" ] || { echo "live-vs-lab: $tool missing (cargo build --release --workspace --bins; make envoy)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "live-vs-lab: python3 is required" >&2; exit 1; }
# The lab file must describe what this script sends.
for line in "arrival: {poisson: {rate: $RATE}}" "prompt_tokens: {uniform: {min: 154, max: 463}}" \
  "output_tokens: {uniform: {min: 50, max: 150}}" \
  "shared_prefixes: {fraction: 1.0, groups: 12, prefix_tokens: {constant: 1547}}"; do
  grep -qxF "$line" "$LAB_WORKLOAD" || { echo "live-vs-lab: $LAB_WORKLOAD no longer says '$line'" >&2; exit 1; }
done
for setup in $SETUPS; do
  case "$setup" in round-robin | random | default | predicted) ;; *) echo "live-vs-lab: unknown setup $setup" >&2; exit 2 ;; esac
done

# Simulated → real: rates × scale, run length and scrape interval ÷ scale.
times_scale() { awk -v x="$1" -v f="$TIME_SCALE" 'BEGIN { printf "%g", x * f }'; }
over_scale() { awk -v x="$1" -v f="$TIME_SCALE" 'BEGIN { printf "%d", x / f + 0.5 }'; }
LIVE_RATE=$(times_scale "$RATE")
LIVE_DURATION_MS=$(over_scale "$((DURATION * 1000))")
SCRAPE_MS=$(over_scale 50)
[ "$SCRAPE_MS" -ge 1 ] || { echo "live-vs-lab: TIME_SCALE $TIME_SCALE is too fast for epp's scraping" >&2; exit 2; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "${SIM_PORTS[@]}" "$EPP_PORT" $((BASE_PORT + 11)) "$EPP_METRICS_PORT" "$LISTEN_PORT" "$ADMIN_PORT"; do
  if port_in_use "$port"; then
    echo "live-vs-lab: port $port is already in use; pick other ports with BASE_PORT=NNNNN" >&2
    exit 1
  fi
done

mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/live-*.json "$OUT_DIR"/live-*.prefix "$OUT_DIR"/lab-*.json "$OUT_DIR"/*.log
WORK=$(mktemp -d)
PIDS=()
stop_all() {
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  local status=$?
  stop_all
  rm -rf "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { # message logfile
  echo "live-vs-lab: $1; the end of $2:" >&2
  tail -n 30 "$2" >&2
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

start() { # logfile command...
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
}

# Prefix-cache hits and queries summed over the fleet (vLLM counters on each replica's /metrics).
fleet_prefix_counters() {
  local port
  for port in "${SIM_PORTS[@]}"; do curl -sf "http://127.0.0.1:$port/metrics" || true; done |
    awk '/^vllm:prefix_cache_hits(_total)?[ {]/ { h += $NF } /^vllm:prefix_cache_queries(_total)?[ {]/ { q += $NF }
         END { printf "%d %d\n", h, q }'
}

run_live() { # round setup
  local round=$1 setup=$2 tag="r$1-$2" endpoints
  endpoints=$(printf '127.0.0.1:%s,' "${SIM_PORTS[@]}")
  endpoints=${endpoints%,}
  start "$OUT_DIR/sim-$tag.log" env RUST_LOG=warn "$BIN_DIR/epp-sim" --port "${SIM_PORTS[0]}" \
    --profiles "$PROFILES" --time-scale "$TIME_SCALE" --seed "$SEED" --model "$MODEL"
  local sim_pid=$LAST_PID port
  for port in "${SIM_PORTS[@]}"; do wait_for_port "$port" epp-sim "$OUT_DIR/sim-$tag.log" "$sim_pid"; done
  if [ "$setup" = round-robin ]; then
    LISTEN_PORT=$LISTEN_PORT ADMIN_PORT=$ADMIN_PORT BACKEND_PORT_1=${SIM_PORTS[0]} BACKEND_PORT_2=${SIM_PORTS[1]} \
      BACKEND_PORT_3=${SIM_PORTS[2]} BACKEND_PORT_4=${SIM_PORTS[3]} \
      scripts/render-envoy-config.sh deploy/envoy/envoy-direct-pool.yaml >"$WORK/envoy.yaml"
  else
    local config=()
    if [ "$setup" = random ]; then config=(--config-file "$RANDOM_CONFIG"); fi
    local pool=(--endpoints "$endpoints")
    if [ "$setup" = predicted ]; then
      # The accelerator labels of fleet-live.yaml, which the predictor's features read: file discovery
      # carries labels, --endpoints does not.
      config=(--config-file "$PREDICTED_CONFIG" --latency-objective-type "$LATENCY_OBJECTIVE")
      {
        echo "endpoints:"
        local i accelerators=(h100 h100 l4 l4)
        for i in 0 1 2 3; do
          echo "  - {name: sim-$i, address: 127.0.0.1, port: \"${SIM_PORTS[$i]}\", labels: {accelerator: ${accelerators[$i]}}}"
        done
      } >"$WORK/endpoints.yaml"
      pool=(--endpoints-file "$WORK/endpoints.yaml")
    fi
    start "$WORK/epp.log" "$BIN_DIR/epp" --grpc-port "$EPP_PORT" --grpc-health-port $((BASE_PORT + 11)) \
      --metrics-port "$EPP_METRICS_PORT" "${pool[@]}" --secure-serving=false --pool-name live \
      --refresh-metrics-interval "${SCRAPE_MS}ms" --log-level warn "${config[@]}"
    wait_for_port "$EPP_PORT" epp "$WORK/epp.log" "$LAST_PID"
    wait_for_port "$EPP_METRICS_PORT" epp "$WORK/epp.log" "$LAST_PID"
    sleep 0.5 # epp scrapes every replica (every SCRAPE_MS) before the first request
    LISTEN_PORT=$LISTEN_PORT ADMIN_PORT=$ADMIN_PORT EXTPROC_PORT=$EPP_PORT EXTPROC_TRANSPORT=raw_buffer.v3.RawBuffer \
      scripts/render-envoy-config.sh deploy/envoy/envoy-full-duplex.yaml >"$WORK/envoy.yaml"
  fi
  start "$WORK/envoy.log" "$ENVOY" -c "$WORK/envoy.yaml" --base-id $((RANDOM % 60000 + 1)) -l warning \
    --concurrency "$ENVOY_CONCURRENCY"
  wait_for_port "$LISTEN_PORT" envoy "$WORK/envoy.log" "$LAST_PID"
  echo "== round $round/$ROUNDS: $setup"
  # The same seed for every setup of a round: the same requests at the same times.
  if ! "$BIN_DIR/epp-bench" run --url "http://127.0.0.1:$LISTEN_PORT" "${LIVE_WORKLOAD[@]}" \
    --poisson "$LIVE_RATE" --duration "${LIVE_DURATION_MS}ms" --seed $((SEED * 1000 + round)) --timeout 300s \
    --max-error-rate 0 --json "$OUT_DIR/live-$tag.json" --samples >"$WORK/bench.txt"; then
    cat "$WORK/bench.txt"
    echo "live-vs-lab: $setup failed requests in round $round" >&2
    exit 1
  fi
  grep -E '^(requests|throughput) ' "$WORK/bench.txt" | sed 's/^/   /'
  fleet_prefix_counters >"$OUT_DIR/live-$tag.prefix"
  stop_all
}

echo "== live: ${ROUNDS} rounds × {$SETUPS}, ${DURATION} s of Poisson ${RATE} req/s each (simulated time;" \
  "epp-sim --time-scale $TIME_SCALE: ${LIVE_RATE} req/s for ${LIVE_DURATION_MS} ms real)"
for round in $(seq 1 "$ROUNDS"); do
  for setup in $SETUPS; do run_live "$round" "$setup"; done
done
lag_warnings=$(cat "$OUT_DIR"/sim-*.log | grep -c 'cannot keep up' || true)

lab_baselines=()
for setup in $SETUPS; do case "$setup" in random | predicted) ;; *) lab_baselines+=("$setup") ;; esac; done
lab_args=(--fleet "$FLEET" --workload "$LAB_WORKLOAD" --duration "${DURATION}s" --latency-objective-type "$LATENCY_OBJECTIVE")
if [[ " $SETUPS " == *" random "* ]]; then lab_args+=(--config "$RANDOM_CONFIG"); fi
# The lab names a config column after its file (predicted-latency for the guide config).
if [[ " $SETUPS " == *" predicted "* ]]; then lab_args+=(--config "$PREDICTED_CONFIG"); fi
[ ${#lab_baselines[@]} -eq 0 ] || lab_args+=(--baselines "$(IFS=,; echo "${lab_baselines[*]}")")
echo "== lab: $LAB_ROUNDS cold runs of ${DURATION} s (seeds 1..$LAB_ROUNDS): epp-bench lab ${lab_args[*]} --seed N"
for round in $(seq 1 "$LAB_ROUNDS"); do
  "$BIN_DIR/epp-bench" lab "${lab_args[@]}" --seed "$round" --json "$OUT_DIR/lab-r$round.json" >"$WORK/lab.txt" \
    2>"$WORK/lab.err" || fail "the lab failed" "$WORK/lab.err"
  if [ "$round" = 1 ]; then cp "$WORK/lab.txt" "$OUT_DIR/lab-r1.txt"; fi
done

machine() {
  local cpu
  cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')
  echo "Measured $(date -u +%Y-%m-%d) on ${cpu:-unknown CPU} × $(nproc) cores, $(uname -sr);" \
    "epp $(git rev-parse --short HEAD 2>/dev/null || echo '?'), Envoy" \
    "$("$ENVOY" --version 2>/dev/null | grep -o '/[0-9.]*/' | tr -d / | head -1)."
}

{
  machine
  echo
  python3 - "$OUT_DIR" <<PY
import json, sys

out = sys.argv[1]
setups = "$SETUPS".split()
rounds, lab_rounds, scale = int("$ROUNDS"), int("$LAB_ROUNDS"), float("$TIME_SCALE")
tol = {"ttft": float("$TOLERANCE_LATENCY"), "e2e": float("$TOLERANCE_LATENCY"), "rps": float("$TOLERANCE_THROUGHPUT")}
h100_ports = {"sim-${SIM_PORTS[0]}", "sim-${SIM_PORTS[1]}"}
predicted_name = "$(basename "$PREDICTED_CONFIG" .yaml)"

def mean(xs):
    return sum(xs) / len(xs)

def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[min(len(sorted_values), int(rank)) - 1]

live, lab = {}, {}
for name in setups:
    runs = [json.load(open(f"{out}/live-r{r}-{name}.json")) for r in range(1, rounds + 1)]
    ok = [s for run in runs for s in run["samples"] if "error" not in s]
    ttft = sorted(s["ttft_ms"] * scale for s in ok if "ttft_ms" in s)
    e2e = sorted(s["e2e_ms"] * scale / 1000 for s in ok)
    prefix = [list(map(int, open(f"{out}/live-r{r}-{name}.prefix").read().split())) for r in range(1, rounds + 1)]
    h100 = sum(1 for s in ok if s.get("backend") in h100_ports)
    live[name] = {
        "ttft_rounds": [run["ttft_ms"]["p90"] * scale for run in runs],
        "e2e_rounds": [run["e2e_ms"]["p90"] * scale / 1000 for run in runs],
        "ttft_pooled": pct(ttft, 90), "e2e_pooled": pct(e2e, 90),
        "rps": sum(run["ok"] for run in runs) / sum(run["duration_s"] * scale for run in runs),
        "requests": sum(run["requests"] for run in runs), "errors": sum(run["requests"] - run["ok"] for run in runs),
        "h100": h100 / max(1, len(ok)),
        "prefix": sum(p[0] for p in prefix) / max(1, sum(p[1] for p in prefix)),
    }
    live[name]["ttft"] = mean(live[name]["ttft_rounds"])
    live[name]["e2e"] = mean(live[name]["e2e_rounds"])
lab_runs = [json.load(open(f"{out}/lab-r{r}.json")) for r in range(1, lab_rounds + 1)]
for name in setups:
    lab_name = {"predicted": predicted_name}.get(name, name)
    runs = [next(x for x in report["runs"] if x["name"] == lab_name) for report in lab_runs]
    served = [sum(e["requests"] for e in run["endpoints"] if e["profile"] == "h100-8b") for run in runs]
    lab[name] = {
        "ttft": mean([run["ttft_s"]["p90"] * 1000 for run in runs]),
        "e2e": mean([run["e2e_s"]["p90"] for run in runs]),
        "rps": sum(run["completed"] for run in runs) / sum(run["makespan_s"] for run in runs),
        "requests": sum(run["requests"] for run in runs),
        "h100": sum(served) / max(1, sum(run["completed"] for run in runs)),
        "prefix": mean([run["prefix_hit_rate"] for run in runs]),
    }

print(f"Workload: Poisson $RATE req/s for $DURATION s per run (simulated time), chat, prompts of 12 shared system "
      f"prompts + 100–300 words, 50–150 output tokens; fleet 2 × h100-8b + 2 × l4-8b. Live: {rounds} rounds per "
      f"setup, epp-sim --time-scale $TIME_SCALE, a fresh fleet per run; lab: {lab_rounds} runs (seeds 1–{lab_rounds}). "
      f"epp-sim lag warnings: $lag_warnings.\n")
print("| setup | requests live / lab | TTFT p90 ms live (rounds) | lab | E2E p90 s live (rounds) | lab "
      "| req/s live | lab | on H100s live | lab | prefix-cache hits live | lab |")
print("|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for name in setups:
    a, b = live[name], lab[name]
    t_rounds = ", ".join(f"{v:.0f}" for v in a["ttft_rounds"])
    e_rounds = ", ".join(f"{v:.2f}" for v in a["e2e_rounds"])
    errors = f" ({a['errors']} errors)" if a["errors"] else ""
    print(f"| {name} | {a['requests']}{errors} / {b['requests']} | **{a['ttft']:.0f}** ({t_rounds}) | **{b['ttft']:.0f}** "
          f"| **{a['e2e']:.2f}** ({e_rounds}) | **{b['e2e']:.2f}** | {a['rps']:.2f} | {b['rps']:.2f} "
          f"| {a['h100'] * 100:.0f}% | {b['h100'] * 100:.0f}% | {a['prefix'] * 100:.0f}% | {b['prefix'] * 100:.0f}% |")

def sign(values, metric, x, y):
    a, b = values[x][metric], values[y][metric]
    if abs(a - b) <= tol[metric] * max(abs(a), abs(b)):
        return 0
    better = a < b if metric != "rps" else a > b
    return -1 if better else 1

def ranking(values, metric):
    order = sorted(setups, key=lambda n: values[n][metric], reverse=(metric == "rps"))
    text = order[0]
    for prev, cur in zip(order, order[1:]):
        text += (" ≈ " if sign(values, metric, prev, cur) == 0 else (" < " if metric != "rps" else " > ")) + cur
    return text

metrics = [("ttft", "TTFT p90 (lower first)"), ("e2e", "E2E p90 (lower first)"), ("rps", "throughput (higher first)")]
print("\n| ranking by | live | lab | verdict |")
print("|---|---|---|---|")
verdicts = []
for metric, label in metrics:
    pairs = [(x, y) for i, x in enumerate(setups) for y in setups[i + 1:]]
    signs = [(sign(live, metric, x, y), sign(lab, metric, x, y)) for x, y in pairs]
    if all(s == t for s, t in signs):
        verdict = "agree"
    elif any(s * t < 0 for s, t in signs):
        verdict = "**disagree**"
    else:
        verdict = "agree within tolerance (a tie on one side)"
    verdicts.append(verdict)
    print(f"| {label} | {ranking(live, metric)} | {ranking(lab, metric)} | {verdict} |")
print(f"\nTies: latency p90s within {tol['ttft'] * 100:.0f}%, throughput within {tol['rps'] * 100:.0f}%. "
      "TTFT/E2E p90 = mean over runs of each run's p90; live latencies in simulated time.")
overall = "disagree" if any("disagree" in v for v in verdicts) else "agree"
print(f"\nOverall: the lab and the live runs **{overall}** on the ranking.")
PY
} >"$OUT_DIR/live-vs-lab.md"
echo
cat "$OUT_DIR/live-vs-lab.md"

# Replaces the lines between `<!-- live-vs-lab:begin -->` and `<!-- live-vs-lab:end -->` in $BENCHMARKS_MD.
if [ -n "$BENCHMARKS_MD" ] && [ -f "$BENCHMARKS_MD" ]; then
  if grep -q '<!-- live-vs-lab:begin -->' "$BENCHMARKS_MD"; then
    awk -v file="$OUT_DIR/live-vs-lab.md" '
      $0 == "<!-- live-vs-lab:begin -->" { print; while ((getline line < file) > 0) print line; skip = 1; next }
      $0 == "<!-- live-vs-lab:end -->" { skip = 0 }
      !skip { print }' "$BENCHMARKS_MD" >"$BENCHMARKS_MD.tmp"
    mv "$BENCHMARKS_MD.tmp" "$BENCHMARKS_MD"
    echo "live-vs-lab: updated the live-vs-lab section of $BENCHMARKS_MD"
  else
    echo "live-vs-lab: no <!-- live-vs-lab:begin --> marker in $BENCHMARKS_MD; not updated" >&2
  fi
fi
