#!/usr/bin/env bash
# SGLang's own KV-event publisher module, for epp's tests against the real thing without an engine:
# downloads the sglang wheel (no dependencies, ~40 MB) and keeps only
# sglang/srt/disaggregation/kv_events.py, which imports nothing of sglang's (msgspec, pyzmq and pydantic,
# all in .venv-vllm). Usage: scripts/sglang-kv-events.sh DIR   (writes DIR/kv_events.py)
#
# Pinned to 0.5.15 on purpose: its replay ROUTER sends `["", seq, payload]`, without the topic frame
# (older vLLM's form too); from 0.5.16 on SGLang sends the topic as vLLM does, which the vLLM publisher
# test already covers. Its events are tagged positional arrays and its CPU tier is `CPU_PINNED`.
# Idempotent: does nothing if DIR/kv_events.py is there.
set -euo pipefail

DIR=${1:?usage: $0 DIR}
VERSION=0.5.15
PYTHON=${PYTHON:-python3}
[ -f "$DIR/kv_events.py" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON" -m pip download --quiet --no-deps "sglang==$VERSION" -d "$tmp"
mkdir -p "$DIR"
"$PYTHON" - "$tmp" "$DIR" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(f"{sys.argv[1]}/sglang-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    source = z.read("sglang/srt/disaggregation/kv_events.py")
with open(f"{sys.argv[2]}/kv_events.py", "wb") as out:
    out.write(source)
PY
echo "sglang $VERSION kv_events.py -> $DIR"
