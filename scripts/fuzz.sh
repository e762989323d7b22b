#!/usr/bin/env bash
# Fuzzing campaign: each target in FUZZ_TARGETS (default: all of them) runs FUZZ_RUNS executions (default
# 10,000,000) under libFuzzer (cargo-fuzz, nightly, no sanitizer: epp has no unsafe code, and debug
# assertions stay on so integer overflow panics), starting from and growing crates/fuzz/corpus/<target>;
# the grown corpus is then minimised (a libFuzzer merge on edge coverage) so that the checked-in corpus
# stays small. Prints one
# markdown row per target: executions, crashes, seconds, executions/s, corpus files and bytes.
# A crash leaves its input in crates/fuzz/libfuzzer/artifacts/<target>/ and fails the script.
#
# usage: scripts/fuzz.sh            FUZZ_RUNS=1000000 FUZZ_TARGETS="metrics_text sse_usage" scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZ_RUNS=${FUZZ_RUNS:-10000000}
FUZZ_TARGETS=${FUZZ_TARGETS:-"metrics_text openai_request sse_usage config_loader extproc_stream kv_events chat_template peer_datagram byte_words"}
FUZZ_MAX_LEN=${FUZZ_MAX_LEN:-8192}
FUZZ_DIR=crates/fuzz/libfuzzer
LOG_DIR=${LOG_DIR:-target/fuzz-logs}
FLAGS=(--fuzz-dir "$FUZZ_DIR" --sanitizer none --debug-assertions)

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q '^nightly' || { echo "fuzz.sh: needs a nightly toolchain (rustup)" >&2; exit 1; }
mkdir -p "$LOG_DIR"
cargo run -q -p epp-fuzz --bin epp-fuzz-seeds >/dev/null

echo "| target | executions | crashes | seconds | exec/s | corpus files | corpus bytes |"
echo "|---|---:|---:|---:|---:|---:|---:|"
failed=0
for target in $FUZZ_TARGETS; do
  corpus=crates/fuzz/corpus/$target
  log=$LOG_DIR/$target.log
  start=$(date +%s)
  status=0
  cargo +nightly fuzz run "${FLAGS[@]}" "$target" "$corpus" -- \
    -runs="$FUZZ_RUNS" -max_len="$FUZZ_MAX_LEN" -print_final_stats=1 \
    -artifact_prefix="$FUZZ_DIR/artifacts/$target/" >"$log" 2>&1 || status=$?
  seconds=$(( $(date +%s) - start ))
  executed=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  crashes=0
  if [ "$status" != 0 ]; then crashes=1; failed=1; fi
  # Minimise on edge coverage alone (-use_counters=0): `cargo fuzz cmin` also keeps every input that
  # changes an edge's hit-count bucket, which left ~4x the files for the same edges.
  minimised=$(mktemp -d)
  if cargo +nightly fuzz run "${FLAGS[@]}" "$target" "$minimised" "$corpus" -- -merge=1 -use_counters=0 \
    -max_len="$FUZZ_MAX_LEN" >"$LOG_DIR/$target.cmin.log" 2>&1; then
    rm -rf "$corpus" && mv "$minimised" "$corpus"
  else
    echo "fuzz.sh: minimising $target failed (see $LOG_DIR/$target.cmin.log); corpus left as grown" >&2
    rm -rf "$minimised"
  fi
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  rate=$(( executed / (seconds > 0 ? seconds : 1) ))
  echo "| $target | $executed | $crashes | $seconds | $rate | $files | $bytes |"
  [ "$status" = 0 ] || echo "fuzz.sh: $target failed (exit $status); see $log and $FUZZ_DIR/artifacts/$target/" >&2
done
exit $failed
