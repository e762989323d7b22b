#!/usr/bin/env bash
# Runs the predicted-latency comparison over many seeds and prints the mean ± standard deviation of every
# metric per config as a Markdown table (BENCHMARKS.md, "Predicted-latency routing in the lab").
#
#   usage: crates/lab/inputs/predicted/seeds.sh [FLEET (fleet-mixed.yaml)] [WORKLOAD (workload-longtail-tpot100.yaml)]
#   env:   SEEDS (10), FIRST_SEED (1; seeds FIRST_SEED..FIRST_SEED+SEEDS-1), RATE (the workload file's),
#          DURATION (the file's), OUT (a temp dir; keeps the JSON),
#          LAB (target/release/epp-lab), BASELINES (default), JOBS (nproc),
#          CONFIGS (config/predicted-latency-epp.yaml config/predicted-latency.yaml
#            crates/lab/inputs/predicted/default-prefix6.yaml):
#            run on the workload as it is (no SLO headers unless the file sends them),
#          SLO_CONFIGS (config/predicted-latency-slo.yaml): run on a copy with send_slo_headers: true
# Every config of one seed sees the same requests (the headers change nothing else in the plan).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."
FLEET=${1:-crates/lab/inputs/predicted/fleet-mixed.yaml}
WORKLOAD=${2:-crates/lab/inputs/predicted/workload-longtail-tpot100.yaml}
SEEDS=${SEEDS:-10}
FIRST_SEED=${FIRST_SEED:-1}
for n in SEEDS FIRST_SEED; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || { echo "seeds.sh: $n must be a positive integer, got '${!n}'" >&2; exit 2; }
done
LAST_SEED=$((FIRST_SEED + SEEDS - 1))
LAB=${LAB:-${CARGO_TARGET_DIR:-target}/release/epp-lab}
CONFIGS=${CONFIGS-config/predicted-latency-epp.yaml config/predicted-latency.yaml crates/lab/inputs/predicted/default-prefix6.yaml}
SLO_CONFIGS=${SLO_CONFIGS-config/predicted-latency-slo.yaml}
BASELINES=${BASELINES-default}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
[ -x "$LAB" ] || { echo "seeds.sh: $LAB missing (cargo build --release -p epp-lab)" >&2; exit 1; }

workload=$OUT/workload.yaml
cp "$WORKLOAD" "$workload"
if [ -n "${RATE:-}" ]; then
  sed -i -E "s/^arrival: \{poisson: \{rate: [0-9.]+\}\}$/arrival: {poisson: {rate: $RATE}}/" "$workload"
  grep -qxF "arrival: {poisson: {rate: $RATE}}" "$workload" || { echo "seeds.sh: cannot set the rate" >&2; exit 2; }
fi
with_headers=$OUT/workload-slo-headers.yaml
sed -E 's/^send_slo_headers: .*$//' "$workload" >"$with_headers"
echo "send_slo_headers: true" >>"$with_headers"
common=(--fleet "$FLEET" --jobs "${JOBS:-$(nproc)}")
[ -z "${DURATION:-}" ] || common+=(--duration "$DURATION")
plain=()
for c in $CONFIGS; do plain+=(--config "$c"); done
[ -z "$BASELINES" ] || plain+=(--baselines "$BASELINES")
slo=()
for c in $SLO_CONFIGS; do slo+=(--config "$c"); done
lab() { # output-stem workload args...
  local stem=$1 file=$2
  shift 2
  "$LAB" "${common[@]}" --workload "$file" "$@" --json "$stem.json" >"$stem.txt" 2>"$stem.err" ||
    { cat "$stem.err" >&2; exit 1; }
}
for seed in $(seq "$FIRST_SEED" "$LAST_SEED"); do
  [ ${#plain[@]} -eq 0 ] || lab "$OUT/seed-$seed" "$workload" "${plain[@]}" --seed "$seed"
  [ ${#slo[@]} -eq 0 ] || lab "$OUT/seed-$seed-slo" "$with_headers" "${slo[@]}" --seed "$seed"
done

python3 - "$OUT" "$FIRST_SEED" "$LAST_SEED" "$FLEET" "$WORKLOAD" "$(grep -oE "rate: [0-9.]+" "$workload" | head -1 | cut -d" " -f2)" <<'PY'
import json, statistics, sys

out, first_seed, last, fleet, workload, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7]
import os

def load(seed):
    parts = [f"{out}/seed-{seed}.json", f"{out}/seed-{seed}-slo.json"]
    reports = [json.load(open(p)) for p in parts if os.path.exists(p)]
    merged = dict(reports[0])
    merged["runs"] = [run for rep in reports for run in rep["runs"]]
    return merged

reports = [load(s) for s in range(first_seed, last + 1)]
names = [r["name"] for r in reports[0]["runs"]]

def get(run, path):
    if path == "l4_share":
        l4 = sum(e["requests"] for e in run["endpoints"] if e["profile"].startswith("l4"))
        return l4 / max(1, sum(e["requests"] for e in run["endpoints"]))
    x = run
    for key in path.split("."):
        if x is None:
            return None
        x = x.get(key)
    return x

rows = [
    ("SLO attainment (%)", "slo_attainment", 100),
    ("within the TTFT bound (%)", "ttft_attainment", 100),
    ("within the TPOT bound (%)", "tpot_attainment", 100),
    ("requests sent to L4s (%)", "l4_share", 100),
    ("TTFT p50 (ms)", "ttft_s.p50", 1000),
    ("TTFT p90 (ms)", "ttft_s.p90", 1000),
    ("E2E p50 (s)", "e2e_s.p50", 1),
    ("E2E p90 (s)", "e2e_s.p90", 1),
    ("TPOT p50 (ms)", "tpot_s.p50", 1000),
    ("TPOT p90 (ms)", "tpot_s.p90", 1000),
    ("throughput (req/s)", "throughput_rps", 1),
    ("output (tok/s)", "output_tokens_per_s", 1),
    ("rejected 429", "rejected_429", 1),
    ("aborted (too long for the KV cache)", "aborted", 1),
    ("prefix hit rate (%)", "prefix_hit_rate", 100),
    ("predictor warm-up (s)", "predictor.warmup_s", 1),
    ("TTFT/E2E model MAPE held-out (%)", "predictor.ttft_heldout_mape", 100),
    ("TTFT/E2E model MAPE live (%)", "predictor.ttft_live_mape", 100),
    ("TPOT model MAPE held-out (%)", "predictor.tpot_heldout_mape", 100),
    ("TPOT model MAPE live (%)", "predictor.tpot_live_mape", 100),
]

def cell(name, path, scale):
    values = []
    for rep in reports:
        run = next(r for r in rep["runs"] if r["name"] == name)
        v = get(run, path)
        if v is not None:
            values.append(v * scale)
    if not values:
        return "–"
    m = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    digits = 0 if abs(m) >= 100 else (1 if abs(m) >= 1 else 2)
    return f"{m:.{digits}f} ± {sd:.{digits}f}"

first = reports[0]
print(f"{fleet} ({first['replicas']} replicas), {workload} at rate {rate} ({first['requests']} requests in seed {first_seed}), "
      f"{first['duration_s']:.0f} s per run, seeds {first_seed}–{last}: mean ± standard deviation over seeds.\n")
print("| metric | " + " | ".join(names) + " |")
print("|---|" + "---:|" * len(names))
for label, path, scale in rows:
    print(f"| {label} | " + " | ".join(cell(n, path, scale) for n in names) + " |")
PY
echo "seeds.sh: per-seed reports in $OUT" >&2
