#!/usr/bin/env bash
# Precise vs approximate prefix-cache routing, live, with one and with two active epp replicas (issue 20).
#
# Fleet: 4 epp-sim pods (PROFILE_NAME, NUM_GPU_BLOCKS KV blocks each), each on its own loopback address
# (127.0.0.21-24) as pods are, publishing vLLM-format KV events on one port and replaying on another.
# Workload: WORKLOAD, by default crates/lab/inputs/workload-live.yaml (12 shared system prompts of 1,547
# tokens, 154-463-token questions, 50-150 output tokens; Poisson), sent by two epp-bench processes at half
# the rate each. crates/lab/inputs/precise/workload-live-eviction.yaml (with NUM_GPU_BLOCKS=1500) is the
# one where evictions decide.
# Setups, each on a fresh fleet (no run inherits a cache):
#   approx-1   one epp (+ Envoy), the approximate producer; both clients send to it
#   approx-2   two epps, each behind its own Envoy; each client sends to one (active-active)
#   precise-1  as approx-1 with config/precise-prefix.yaml (token-producer + precise producer)
#   precise-2  as approx-2 with config/precise-prefix.yaml
#   peers-2    as precise-2, each epp's config given `speculativePeers` naming the other (an epp extension:
#              the two share their speculative entries over UDP on loopback)
# With TOKENIZER_DIR (a model directory: tokenizer.json, tokenizer_config.json; `make vllm` writes
# .vllm-model), every pod tokenizes prompts with that model's tokenizer and chat template (epp-sim
# --tokenizer-dir) instead of its stand-in, and two more setups run:
#   local-1    as precise-1, with token-producer's tokenizerFile and tokenizerConfigFile: chat prompts
#              rendered and tokenized in epp, no render call
#   local-2    as precise-2, the same
# Both configs weigh the same scorers the same (prefix 2, queue 1, KV utilisation 1, max-score picker:
# the shipped precise config's weights, llm-d's guide's); only the prefix producer differs. Nothing is
# tuned here. Measured: the fleet's prefix-cache hit rate (vllm:prefix_cache_hits / queries over the run)
# and TTFT p90 over every request of both clients, per round; the table gives the mean over rounds.
#
#   usage: scripts/precise-vs-approx.sh   (after cargo build --release --workspace --bins; make envoy)
#   env:   ROUNDS (2), DURATION (30 s of arrivals), RATE (12 req/s in all), SEED (1), TIME_SCALE (1),
#          PROFILE_NAME (h100-8b), NUM_GPU_BLOCKS (3000: small enough that prefixes are evicted),
#          BASE_PORT (21000), OUT_DIR (target/precise-vs-approx), PROFILE (release), TOKENIZER_DIR (unset),
#          WORKLOAD (crates/lab/inputs/workload-live.yaml), SETUPS (a subset of the setups above, in order),
#          PRECISE_CONFIG (config/precise-prefix.yaml: the precise and local setups' config),
#          EPP_CPUS and OTHER_CPUS (unset: CPU lists for taskset, to keep the epps off the cores the
#          simulators, Envoys and clients share, e.g. EPP_CPUS=1 OTHER_CPUS=0)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROFILE=${PROFILE:-release}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
BIN_DIR=$TARGET_DIR/$PROFILE
OUT_DIR=${OUT_DIR:-$TARGET_DIR/precise-vs-approx}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-30}
RATE=${RATE:-12}
SEED=${SEED:-1}
TIME_SCALE=${TIME_SCALE:-1}
PROFILE_NAME=${PROFILE_NAME:-h100-8b}
NUM_GPU_BLOCKS=${NUM_GPU_BLOCKS:-3000}
BASE_PORT=${BASE_PORT:-21000}
MODEL=meta-llama/Llama-3.1-8B-Instruct
IPS=(127.0.0.21 127.0.0.22 127.0.0.23 127.0.0.24)
SIM_PORT=$((BASE_PORT + 1))
KV_PORT=$((BASE_PORT + 2))
REPLAY_PORT=$((BASE_PORT + 3))
TOKENIZER_DIR=${TOKENIZER_DIR:-}
WORKLOAD=${WORKLOAD:-crates/lab/inputs/workload-live.yaml}
PRECISE_CONFIG=${PRECISE_CONFIG:-config/precise-prefix.yaml}
SIM_TOKENIZER=()
EPP_PIN=() OTHER_PIN=()
[ -z "${EPP_CPUS:-}" ] || EPP_PIN=(taskset -c "$EPP_CPUS")
[ -z "${OTHER_CPUS:-}" ] || OTHER_PIN=(taskset -c "$OTHER_CPUS")
DEFAULT_SETUPS="approx-1 precise-1 approx-2 precise-2"
if [ -n "$TOKENIZER_DIR" ]; then
  TOKENIZER_DIR=$(cd "$TOKENIZER_DIR" && pwd)
  SIM_TOKENIZER=(--tokenizer-dir "$TOKENIZER_DIR")
  DEFAULT_SETUPS="approx-1 precise-1 local-1 approx-2 precise-2 local-2"
fi
SETUPS=${SETUPS:-$DEFAULT_SETUPS}

ENVOY=${ENVOY_BIN:-$(ls .venv/lib/python*/site-packages/envoy/_bin/envoy .venv/bin/envoy 2>/dev/null | head -1)}
for tool in "$BIN_DIR/epp" "$BIN_DIR/epp-sim" "$BIN_DIR/epp-bench" "$ENVOY"; do
  [ -x "$tool" ] || { echo "precise-vs-approx: $tool missing (cargo build --release --workspace --bins; make envoy)" >&2; exit 1; }
done

mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/*.json "$OUT_DIR"/*.prefix "$OUT_DIR"/*.tokens "$OUT_DIR"/*.log "$OUT_DIR"/*.metrics "$OUT_DIR"/*.cpu
WORK=$(mktemp -d)
PIDS=()
EPP_PIDS=()
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
  EPP_PIDS=()
}
trap 'status=$?; stop_all; rm -rf "$WORK"; exit $status' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() { # logfile command...
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  PIDS+=($!)
}
wait_for() { # host port logfile
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "precise-vs-approx: nothing listens on $1:$2; the end of $3:" >&2
  tail -n 30 "$3" >&2
  exit 1
}

approx_config() {
  cat crates/lab/inputs/configs/approx-prefix.yaml
}

precise_config() {
  sed -e "s#http://render:8000#http://${IPS[0]}:$SIM_PORT#" -e "s/ socketPort: 5557/ socketPort: $KV_PORT/" \
    -e "s/replaySocketPort: 5558/replaySocketPort: $REPLAY_PORT/" -e "s#meta-llama/Llama-3.1-8B-Instruct#$MODEL#" \
    "$PRECISE_CONFIG"
}

peers_config() { # precise_config for epp $1 (0 or 1), sharing its speculative entries with the other
  local own=$((BASE_PORT + 15 + 10 * $1)) other=$((BASE_PORT + 15 + 10 * (1 - $1)))
  precise_config | sed -e "s#^    speculativeIndexing: true#    speculativeIndexing: true\n    speculativePeers:\n      listen: \"127.0.0.1:$own\"\n      peers: [\"127.0.0.1:$other\"]#"
}

local_config() { # precise_config with the model's tokenizer and chat template in epp
  precise_config | sed -e "s#^    vllm:#    tokenizerFile: $TOKENIZER_DIR/tokenizer.json\n    tokenizerConfigFile: $TOKENIZER_DIR/tokenizer_config.json\n    vllm:#"
}

fleet_prefix_counters() {
  local ip
  for ip in "${IPS[@]}"; do curl -sf "http://$ip:$SIM_PORT/metrics" || true; done |
    awk '/^vllm:prefix_cache_hits(_total)?[ {]/ { h += $NF } /^vllm:prefix_cache_queries(_total)?[ {]/ { q += $NF }
         END { printf "%d %d\n", h, q }'
}

# Sums over the epps of a run: token-producer's requests, those tokenized in process, those left without ids.
epp_token_counters() {
  local n
  for n in 0 1; do curl -sf "http://127.0.0.1:$((BASE_PORT + 12 + 10 * n))/metrics" || true; done |
    awk '/^epp_token_producer_requests_total / { r += $NF } /^epp_token_producer_local_total / { l += $NF }
         /^epp_token_producer_failures_total / { f += $NF } END { printf "%d %d %d\n", r, l, f }'
}

# Sums over the epps of a run: peer messages sent, applied and dropped (speculativePeers).
epp_peer_counters() {
  local n
  for n in 0 1; do curl -sf "http://127.0.0.1:$((BASE_PORT + 12 + 10 * n))/metrics" || true; done |
    awk '/^epp_kv_cache_peer_messages_sent_total / { s += $NF } /^epp_kv_cache_peer_messages_received_total / { r += $NF }
         /^epp_kv_cache_peer_messages_dropped_total / { d += $NF } END { printf "%d %d %d\n", s, r, d }'
}

# Sums over the epps of a run: CPU seconds (user + system) so far, from /proc.
epp_cpu_seconds() {
  local pid ticks=0
  for pid in "${EPP_PIDS[@]}"; do
    ticks=$((ticks + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f\n", t / hz }'
}

# Starts epp number $1 (0 or 1) with config file $2 and its Envoy; echoes the Envoy listen port.
start_epp() {
  local n=$1 config=$2 grpc=$((BASE_PORT + 10 + 10 * $1)) listen=$((BASE_PORT + 80 + $1))
  local endpoints
  endpoints=$(printf "%s:$SIM_PORT," "${IPS[@]}")
  start "$OUT_DIR/epp-$n.log" ${EPP_PIN[@]+"${EPP_PIN[@]}"} "$BIN_DIR/epp" --grpc-port "$grpc" --grpc-health-port $((grpc + 1)) \
    --metrics-port $((grpc + 2)) --endpoints "${endpoints%,}" --secure-serving=false --pool-name live \
    --refresh-metrics-interval 50ms --log-level warn --config-file "$config"
  EPP_PIDS+=("${PIDS[-1]}")
  wait_for 127.0.0.1 "$grpc" "$OUT_DIR/epp-$n.log"
  LISTEN_PORT=$listen ADMIN_PORT=$((BASE_PORT + 90 + n)) EXTPROC_PORT=$grpc \
    EXTPROC_TRANSPORT=raw_buffer.v3.RawBuffer scripts/render-envoy-config.sh deploy/envoy/envoy-full-duplex.yaml \
    >"$WORK/envoy-$n.yaml"
  start "$OUT_DIR/envoy-$n.log" ${OTHER_PIN[@]+"${OTHER_PIN[@]}"} "$ENVOY" -c "$WORK/envoy-$n.yaml" --base-id $((RANDOM % 60000 + 1)) -l warning \
    --concurrency 1
  wait_for 127.0.0.1 "$listen" "$OUT_DIR/envoy-$n.log"
}

run() { # round setup
  local round=$1 setup=$2 tag="r$1-$2" ip i
  for ip in "${IPS[@]}"; do
    start "$OUT_DIR/sim-$tag-$ip.log" ${OTHER_PIN[@]+"${OTHER_PIN[@]}"} env RUST_LOG=warn "$BIN_DIR/epp-sim" --host "$ip" --port "$SIM_PORT" \
      --profiles "$PROFILE_NAME" --num-gpu-blocks "$NUM_GPU_BLOCKS" --time-scale "$TIME_SCALE" --seed "$SEED" \
      --model "$MODEL" --kv-events-port "$KV_PORT" --kv-replay-port "$REPLAY_PORT" ${SIM_TOKENIZER[@]+"${SIM_TOKENIZER[@]}"}
  done
  for ip in "${IPS[@]}"; do wait_for "$ip" "$SIM_PORT" "$OUT_DIR/sim-$tag-$ip.log"; done
  local configs=("$WORK/config.yaml" "$WORK/config.yaml")
  case "$setup" in
    approx-*) approx_config >"$WORK/config.yaml" ;;
    local-*) local_config >"$WORK/config.yaml" ;;
    peers-*)
      configs=("$WORK/config-0.yaml" "$WORK/config-1.yaml")
      peers_config 0 >"${configs[0]}"
      peers_config 1 >"${configs[1]}"
      grep -q speculativePeers "${configs[0]}" || { echo "precise-vs-approx: $PRECISE_CONFIG has no speculativeIndexing: true" >&2; exit 1; }
      ;;
    *) precise_config >"$WORK/config.yaml" ;;
  esac
  start_epp 0 "${configs[0]}"
  local listen=($((BASE_PORT + 80)) $((BASE_PORT + 80)))
  if [[ "$setup" == *-2 ]]; then
    start_epp 1 "${configs[1]}"
    listen[1]=$((BASE_PORT + 81))
  fi
  sleep 1 # every epp has scraped every pod and subscribed to its events
  echo "== round $round/$ROUNDS: $setup"
  local benches=()
  for i in 0 1; do
    ${OTHER_PIN[@]+"${OTHER_PIN[@]}"} "$BIN_DIR/epp-bench" run --url "http://127.0.0.1:${listen[$i]}" --lab-workload "$WORKLOAD" \
      --model "$MODEL" --poisson "$(awk -v r="$RATE" -v s="$TIME_SCALE" 'BEGIN { printf "%g", r * s / 2 }')" \
      --duration "$(awk -v d="$DURATION" -v s="$TIME_SCALE" 'BEGIN { printf "%d", d * 1000 / s }')ms" \
      --seed $((SEED * 1000 + round * 10 + i)) --prefix-seed "$SEED" --timeout 300s --max-error-rate 0 --samples \
      --json "$OUT_DIR/$tag-client$i.json" >"$WORK/bench-$i.txt" 2>&1 &
    benches+=($!)
  done
  for i in 0 1; do
    wait "${benches[$i]}" || { cat "$WORK/bench-$i.txt"; echo "precise-vs-approx: $setup failed" >&2; exit 1; }
  done
  fleet_prefix_counters >"$OUT_DIR/$tag.prefix"
  epp_token_counters >"$OUT_DIR/$tag.tokens"
  epp_peer_counters >"$OUT_DIR/$tag.peers"
  epp_cpu_seconds >"$OUT_DIR/$tag.cpu"
  for i in 0 1; do curl -sf "http://127.0.0.1:$((BASE_PORT + 12 + 10 * i))/metrics" >"$OUT_DIR/$tag-epp$i.metrics" || true; done
  [[ "$setup" != peers-* ]] || echo "   peer messages sent, applied, dropped: $(cat "$OUT_DIR/$tag.peers")"
  stop_all
}

for round in $(seq 1 "$ROUNDS"); do
  for setup in $SETUPS; do run "$round" "$setup"; done
done

python3 - "$OUT_DIR" "$ROUNDS" "$TIME_SCALE" "$SETUPS" <<'PY'
import json, sys

out, rounds, scale, setups = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split()

def pct(values, p):
    values = sorted(values)
    return values[max(0, min(len(values) - 1, int(-(-len(values) * p // 100)) - 1))] if values else float("nan")

print("| setup | prefix-cache hit rate | TTFT p90 (ms) | TTFT p50 (ms) | requests | token ids: in process / render / none | epp CPU per request |")
print("|---|---:|---:|---:|---:|---:|---:|")
for setup in setups:
    hit, p90, p50, n, tokens, cpu = [], [], [], 0, [0, 0, 0], 0.0
    for r in range(1, rounds + 1):
        samples = [s for i in (0, 1) for s in json.load(open(f"{out}/r{r}-{setup}-client{i}.json"))["samples"]
                   if "error" not in s and "ttft_ms" in s]
        ttft = [s["ttft_ms"] * scale for s in samples]
        p90.append(pct(ttft, 90))
        p50.append(pct(ttft, 50))
        n += len(samples)
        h, q = map(int, open(f"{out}/r{r}-{setup}.prefix").read().split())
        hit.append(h / max(1, q))
        asked, local, failed = map(int, open(f"{out}/r{r}-{setup}.tokens").read().split())
        cpu += float(open(f"{out}/r{r}-{setup}.cpu").read())
        tokens = [tokens[0] + local, tokens[1] + asked - local - failed, tokens[2] + failed]
    mean = lambda xs: sum(xs) / len(xs)
    ids = " / ".join(map(str, tokens)) if setup.split("-")[0] != "approx" else "—"
    print(f"| {setup} | {mean(hit):.3f} | {mean(p90):.0f} | {mean(p50):.0f} | {n} | {ids} | {1000 * cpu / max(1, n):.2f} ms |")
PY
