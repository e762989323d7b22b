#!/usr/bin/env bash
# epp's overhead, measured side by side in one run. Starts 4 fast epp-test-backends and three Envoys in
# front of them: (a) Envoy + epp (full duplex), (b) Envoy + epp-noop-extproc (full duplex, routes round
# robin and does nothing else), (c) Envoy direct (round robin, no ext_proc). Then epp-bench compares them
# in interleaved rounds (a-b-c, a-b-c, ...) so machine noise hits all three alike: once with small chat
# prompts, once with ~220 KB prompts (the GIE #2928 case). Also runs the criterion micro-benchmarks.
# Results go to $OUT_DIR and, unless BENCHMARKS_MD is empty, into BENCHMARKS.md between its markers.
#
#   usage: scripts/bench-overhead.sh [all|live|micro]   (make bench = all; make bench-smoke = SMOKE=1 live)
#   needs: cargo build --release --workspace --bins (PROFILE=debug: target/debug), make envoy (or ENVOY_BIN)
#   env:   ROUNDS (3), ROUND_DURATION (10s), WARMUP (2s), CONCURRENCY (32), PROMPT_TOKENS (200),
#          LARGE_PROMPT_TOKENS (36000, ~220 KB bodies), LARGE_ROUNDS (=ROUNDS), BASE_PORT (19000: uses
#          +1..+4, +10..+12, +20, +31..+33, +41..+43), SMOKE=1 (one 3 s round, small prompts, no
#          figures recorded; fails unless every setup served every request), OUT_DIR, BENCHMARKS_MD,
#          BACKEND (bench: `epp-bench backend`, which sets TCP_NODELAY; test-backend: epp-test-backend)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MODE=${1:-all}
SMOKE=${SMOKE:-0}
PROFILE=${PROFILE:-release}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
BIN_DIR=$TARGET_DIR/$PROFILE
OUT_DIR=${OUT_DIR:-$TARGET_DIR/bench}
BENCHMARKS_MD=${BENCHMARKS_MD-BENCHMARKS.md}
ROUNDS=${ROUNDS:-3}
ROUND_DURATION=${ROUND_DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-32}
PROMPT_TOKENS=${PROMPT_TOKENS:-200}
LARGE_PROMPT_TOKENS=${LARGE_PROMPT_TOKENS:-36000}
LARGE_ROUNDS=${LARGE_ROUNDS:-$ROUNDS}
BACKEND=${BACKEND:-bench}
BASE_PORT=${BASE_PORT:-19000}
if [ "$SMOKE" = 1 ]; then
  ROUNDS=1 ROUND_DURATION=3s WARMUP=0s CONCURRENCY=4 BENCHMARKS_MD=
fi
mkdir -p "$OUT_DIR"

find_envoy() {
  if [ -n "${ENVOY_BIN:-}" ]; then echo "$ENVOY_BIN"; return; fi
  for candidate in .venv/lib/python*/site-packages/envoy/_bin/envoy .venv/bin/envoy; do
    if [ -x "$candidate" ]; then echo "$candidate"; return; fi
  done
  command -v envoy || true
}

# Replaces the lines between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in $BENCHMARKS_MD with FILE.
splice() { # name file
  [ -n "$BENCHMARKS_MD" ] && [ -f "$BENCHMARKS_MD" ] || return 0
  if ! grep -q "<!-- $1:begin -->" "$BENCHMARKS_MD"; then
    echo "bench: no <!-- $1:begin --> marker in $BENCHMARKS_MD; not updated" >&2
    return 0
  fi
  awk -v name="$1" -v file="$2" '
    $0 == "<!-- " name ":begin -->" { print; while ((getline line < file) > 0) print line; skip = 1; next }
    $0 == "<!-- " name ":end -->" { skip = 0 }
    !skip { print }' "$BENCHMARKS_MD" >"$BENCHMARKS_MD.tmp"
  mv "$BENCHMARKS_MD.tmp" "$BENCHMARKS_MD"
  echo "bench: updated the $1 section of $BENCHMARKS_MD"
}

machine() {
  local cpu
  cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')
  echo "Measured $(date -u +%Y-%m-%d) on ${cpu:-unknown CPU} × $(nproc) cores, $(uname -sr);" \
    "epp $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $1."
}

run_micro() {
  local since
  since=$(date +%s)
  echo "== criterion micro-benchmarks (cargo bench)"
  ${CARGO:-cargo} bench -p epp -p epp-predictor
  {
    machine "cargo bench (criterion defaults)"
    echo
    "$BIN_DIR/epp-bench" criterion --dir "$TARGET_DIR/criterion" --since-unix "$since"
  } >"$OUT_DIR/micro.md"
  cat "$OUT_DIR/micro.md"
  splice micro "$OUT_DIR/micro.md"
}

WORK=
PIDS=()
stop_all() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  [ -z "$WORK" ] || rm -rf "$WORK"
  WORK=
}
cleanup() { stop_all; }
trap cleanup EXIT INT TERM

wait_for_port() { # port name logfile pid
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$4" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench: $2 is not listening on port $1; its log:" >&2
  tail -n 40 "$3" >&2
  exit 1
}

start() { # name logfile command...
  local name=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
  echo "   $name (pid $LAST_PID)"
}

start_envoy() { # name template listen admin [VAR=value ...]
  local name=$1 template=$2 listen=$3 admin=$4
  shift 4
  env LISTEN_PORT="$listen" ADMIN_PORT="$admin" "$@" scripts/render-envoy-config.sh "$template" >"$WORK/$name.yaml"
  start "envoy-$name :$listen" "$WORK/envoy-$name.log" \
    "$ENVOY" -c "$WORK/$name.yaml" --base-id $((RANDOM % 60000 + 1)) -l warning
  wait_for_port "$listen" "envoy-$name" "$WORK/envoy-$name.log" "$LAST_PID"
}

run_live() {
  ENVOY=$(find_envoy)
  for tool in "$BIN_DIR/epp" "$BIN_DIR/epp-test-backend" "$BIN_DIR/epp-noop-extproc" "$BIN_DIR/epp-bench" "$ENVOY"; do
    [ -x "$tool" ] || { echo "bench: $tool missing (cargo build --workspace [--release] --bins; make envoy)" >&2; exit 1; }
  done
  WORK=$(mktemp -d)
  local backend_ports=($((BASE_PORT + 1)) $((BASE_PORT + 2)) $((BASE_PORT + 3)) $((BASE_PORT + 4)))
  local epp_port=$((BASE_PORT + 10)) noop_port=$((BASE_PORT + 20))
  local epp_url=http://127.0.0.1:$((BASE_PORT + 31)) noop_url=http://127.0.0.1:$((BASE_PORT + 32))
  local direct_url=http://127.0.0.1:$((BASE_PORT + 33))
  local ports_csv endpoints
  ports_csv=$(IFS=,; echo "${backend_ports[*]}")
  endpoints=$(printf '127.0.0.1:%s,' "${backend_ports[@]}")
  endpoints=${endpoints%,}

  echo "== starting 4 backends ($BACKEND), epp, epp-noop-extproc and 3 Envoys"
  local backend_cmd=("$BIN_DIR/epp-bench" backend)
  [ "$BACKEND" = bench ] || backend_cmd=("$BIN_DIR/epp-test-backend")
  start "$BACKEND :$ports_csv" "$WORK/backends.log" \
    "${backend_cmd[@]}" --ports "$ports_csv" --id bench --model bench-model --chunks 4 --chunk-delay-ms 1
  local backend_pid=$LAST_PID
  for port in "${backend_ports[@]}"; do wait_for_port "$port" epp-test-backend "$WORK/backends.log" "$backend_pid"; done
  start "epp :$epp_port" "$WORK/epp.log" "$BIN_DIR/epp" --grpc-port "$epp_port" \
    --grpc-health-port $((BASE_PORT + 11)) --metrics-port $((BASE_PORT + 12)) --endpoints "$endpoints" \
    --secure-serving=false --pool-name bench --log-level warn
  wait_for_port "$epp_port" epp "$WORK/epp.log" "$LAST_PID"
  start "epp-noop-extproc :$noop_port" "$WORK/noop.log" \
    "$BIN_DIR/epp-noop-extproc" --port "$noop_port" --endpoints "$endpoints"
  wait_for_port "$noop_port" epp-noop-extproc "$WORK/noop.log" "$LAST_PID"
  # Both ext_proc servers plaintext (the no-op one has no TLS), so the comparison is epp's work alone.
  start_envoy epp deploy/envoy/envoy-full-duplex.yaml $((BASE_PORT + 31)) $((BASE_PORT + 41)) EXTPROC_PORT="$epp_port" \
    EXTPROC_TRANSPORT=raw_buffer.v3.RawBuffer
  start_envoy noop deploy/envoy/envoy-full-duplex.yaml $((BASE_PORT + 32)) $((BASE_PORT + 42)) EXTPROC_PORT="$noop_port" \
    EXTPROC_TRANSPORT=raw_buffer.v3.RawBuffer
  start_envoy direct deploy/envoy/envoy-direct-pool.yaml $((BASE_PORT + 33)) $((BASE_PORT + 43)) \
    BACKEND_PORT_1="${backend_ports[0]}" BACKEND_PORT_2="${backend_ports[1]}" \
    BACKEND_PORT_3="${backend_ports[2]}" BACKEND_PORT_4="${backend_ports[3]}"
  sleep 0.5 # epp scrapes every backend at least once

  local common=(--target "epp=$epp_url" --target "noop=$noop_url" --target "direct=$direct_url"
    --model bench-model --concurrency "$CONCURRENCY" --output-tokens 4 --round-duration "$ROUND_DURATION"
    --warmup "$WARMUP" --quiet)
  local small_cmd=("$BIN_DIR/epp-bench" compare "${common[@]}" --rounds "$ROUNDS" --prompt-tokens "$PROMPT_TOKENS")
  local large_cmd=("$BIN_DIR/epp-bench" compare "${common[@]}" --rounds "$LARGE_ROUNDS"
    --prompt-tokens "$LARGE_PROMPT_TOKENS")
  if [ "$SMOKE" = 1 ]; then
    echo "== smoke: every setup must serve every request"
    "${small_cmd[@]}" --max-error-rate 0 --json "$OUT_DIR/smoke.json"
    stop_all
    return
  fi
  echo "== small chat prompts: ${small_cmd[*]}"
  "${small_cmd[@]}" --markdown "$OUT_DIR/small.md" --json "$OUT_DIR/small.json" --max-error-rate 0.01
  echo "== ~220 KB chat prompts: ${large_cmd[*]}"
  "${large_cmd[@]}" --markdown "$OUT_DIR/large.md" --json "$OUT_DIR/large.json" --max-error-rate 0.01
  stop_all # the micro-benchmarks that may follow get a quiet machine
  {
    machine "Envoy $("$ENVOY" --version 2>/dev/null | grep -o '/[0-9.]*/' | tr -d / | head -1)"
    echo "Backends: 4 × \`${backend_cmd[*]##*/} --chunks 4 --chunk-delay-ms 1\`; every process on this one machine."
    echo
    echo "**Small chat prompts** ($PROMPT_TOKENS tokens):"
    echo
    cat "$OUT_DIR/small.md"
    echo
    echo "**~220 KB chat prompts** ($LARGE_PROMPT_TOKENS tokens):"
    echo
    cat "$OUT_DIR/large.md"
  } >"$OUT_DIR/overhead.md"
  echo
  cat "$OUT_DIR/overhead.md"
  splice overhead "$OUT_DIR/overhead.md"
}

case "$MODE" in
  all) run_live; run_micro ;;
  live) run_live ;;
  micro) run_micro ;;
  *) echo "usage: $0 [all|live|micro]" >&2; exit 2 ;;
esac
