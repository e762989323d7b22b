#!/usr/bin/env bash
# Demo: three epp-test-backends reporting different load, epp (release build) picking among them, and
# Envoy (full-duplex ext_proc) in front. Sends a few requests and shows which backend served each, next to
# the queue and KV-cache figures each backend reports. Everything started here is stopped on exit.
#   usage: make demo   (or scripts/demo.sh after `cargo build --release --bins` and `make envoy`)
#   env:   REQUESTS (10), BASE_PORT (18000: uses BASE_PORT+1..+3, +80, +90, +91, +92, +99), ENVOY_BIN
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REQUESTS=${REQUESTS:-10}
BASE_PORT=${BASE_PORT:-18000}
BIN_DIR=${CARGO_TARGET_DIR:-target}/release
ENVOY=${ENVOY_BIN:-.venv/bin/envoy}
BACKEND_PORTS=($((BASE_PORT + 1)) $((BASE_PORT + 2)) $((BASE_PORT + 3)))
# waiting / running / kv per backend: the first is busy, the second idle, the third in between.
LOADS=('{"waiting": 8, "running": 4, "kv": 0.9}' '{"waiting": 0, "running": 1, "kv": 0.2}'
  '{"waiting": 2, "running": 2, "kv": 0.5}')
export LISTEN_PORT=$((BASE_PORT + 80)) ADMIN_PORT=$((BASE_PORT + 99)) EXTPROC_PORT=$((BASE_PORT + 90))
HEALTH_PORT=$((BASE_PORT + 91))
METRICS_PORT=$((BASE_PORT + 92))

for tool in "$BIN_DIR/epp" "$BIN_DIR/epp-test-backend" "$ENVOY"; do
  [ -x "$tool" ] || { echo "demo: $tool missing (run: cargo build --release --bins; make envoy)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "demo: curl is required" >&2; exit 1; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

wait_for_port() { # port name logfile pid
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$4" 2>/dev/null || break
    sleep 0.1
  done
  echo "demo: $2 is not listening on port $1; its log:" >&2
  tail -n 40 "$3" >&2
  exit 1
}

echo "== starting 3 test backends on ports ${BACKEND_PORTS[*]}"
ports_csv=$(IFS=,; echo "${BACKEND_PORTS[*]}")
"$BIN_DIR/epp-test-backend" --ports "$ports_csv" --id demo --model demo-model >"$WORK/backends.log" 2>&1 &
PIDS+=($!)
for i in 0 1 2; do
  wait_for_port "${BACKEND_PORTS[$i]}" epp-test-backend "$WORK/backends.log" "${PIDS[0]}"
  curl -sf -X POST "http://127.0.0.1:${BACKEND_PORTS[$i]}/admin/metrics" -d "${LOADS[$i]}" >/dev/null
done

endpoints=$(printf '127.0.0.1:%s,' "${BACKEND_PORTS[@]}")
echo "== starting epp (ext_proc :$EXTPROC_PORT) with --endpoints ${endpoints%,}"
RUST_LOG=${RUST_LOG:-info} "$BIN_DIR/epp" --grpc-port "$EXTPROC_PORT" --grpc-health-port "$HEALTH_PORT" \
  --metrics-port "$METRICS_PORT" --endpoints "${endpoints%,}" --refresh-metrics-interval 50ms \
  --pool-name demo-pool --secure-serving=false >"$WORK/epp.log" 2>&1 &
PIDS+=($!)
wait_for_port "$EXTPROC_PORT" epp "$WORK/epp.log" "${PIDS[1]}"

echo "== starting Envoy (full duplex) on :$LISTEN_PORT"
scripts/render-envoy-config.sh deploy/envoy/envoy-full-duplex.yaml >"$WORK/envoy.yaml"
"$ENVOY" -c "$WORK/envoy.yaml" --base-id $((RANDOM % 60000 + 1)) -l warning >"$WORK/envoy.log" 2>&1 &
PIDS+=($!)
wait_for_port "$LISTEN_PORT" envoy "$WORK/envoy.log" "${PIDS[2]}"
sleep 0.5 # let epp scrape every backend at least once

echo
echo "== backend load as reported on /metrics"
printf '%-12s %8s %8s %6s\n' backend waiting running kv
for port in "${BACKEND_PORTS[@]}"; do
  metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
  value() { grep "^vllm:$1{" <<<"$metrics" | awk '{print $2}'; }
  printf '%-12s %8s %8s %6s\n' "demo-$port" "$(value num_requests_waiting)" "$(value num_requests_running)" \
    "$(value kv_cache_usage_perc)"
done

echo
echo "== sending $REQUESTS requests through Envoy"
declare -A served=()
for n in $(seq 1 "$REQUESTS"); do
  headers=$(curl -s -o "$WORK/body" -D - -X POST "http://127.0.0.1:$LISTEN_PORT/v1/completions" \
    -H 'content-type: application/json' \
    -d "{\"model\": \"demo-model\", \"prompt\": \"request $n: tell me about endpoint pickers\"}")
  status=$(head -n1 <<<"$headers" | awk '{print $2}')
  [ -n "$status" ] || status="(no response)"
  backend=$({ grep -i '^x-backend-id:' <<<"$headers" || true; } | awk '{print $2}' | tr -d '\r')
  printf 'request %2d -> HTTP %s  served by %s\n' "$n" "$status" "${backend:-<none>}"
  served[${backend:-none}]=$((${served[${backend:-none}]:-0} + 1))
done

echo
echo "== requests per backend"
for backend in "${!served[@]}"; do printf '%-12s %s\n' "$backend" "${served[$backend]}"; done
