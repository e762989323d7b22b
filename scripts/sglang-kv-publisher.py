"""SGLang's own KV-event publisher, without an engine: `ZmqEventPublisher` and the event classes of
sglang/srt/disaggregation/kv_events.py (SGLang 0.5.15, fetched by scripts/sglang-kv-events.sh) publish
batches the way an SGLang scheduler does, for tests of epp's subscriber and replay against the real
thing (tests/e2e_vllm/publisher.rs; run in .venv-vllm, which has msgspec, pyzmq and pydantic).

Usage: sglang-kv-publisher.py KV_EVENTS_PY ENDPOINT REPLAY_ENDPOINT TOPIC BLOCK_SIZE

The module is loaded by its path: it imports nothing of sglang's. Publishes, one batch each, with the
classes' own encoding (tagged positional arrays, `attn_dp_rank`):
  1. BlockStored, prompt A: 4 blocks of token ids 0.., medium unset
  2. BlockStored, prompt B: 2 blocks of token ids 1000.., medium CPU_PINNED (SGLang's host tier)
  3. BlockRemoved: prompt A's last block
then prints "published 3" and, until stdin closes, publishes prompt C (2 blocks of token ids 2000..)
every 0.3 s, as a busy engine keeps publishing: this version's replay sends `["", seq, payload]`, without
the topic frame, so a subscriber learns the model from a live message's topic.
"""
import importlib.util
import sys
import threading
import time


def load(path: str):
    """sglang's kv_events module, from its file alone."""
    spec = importlib.util.spec_from_file_location("sglang_kv_events", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec resolves the classes' annotations through it
    spec.loader.exec_module(module)
    return module


def main() -> None:
    source, endpoint, replay, topic, block_size = sys.argv[1:5] + [int(sys.argv[5])]
    kv = load(source)
    publisher = kv.ZmqEventPublisher(0, endpoint=endpoint, replay_endpoint=replay, topic=topic)

    def stored(hashes, first_token, medium=None):
        tokens = list(range(first_token, first_token + len(hashes) * block_size))
        return kv.BlockStored(
            block_hashes=hashes, parent_block_hash=None, token_ids=tokens, block_size=block_size,
            lora_id=None, medium=medium,
        )

    batches = [
        [stored([11, 12, 13, 14], 0)],
        [stored([21, 22], 1000, medium=kv.StorageMedium.CPU.value)],
        [kv.BlockRemoved(block_hashes=[14])],
    ]
    for events in batches:
        publisher.publish(kv.KVEventBatch(ts=time.time(), events=events))
    # The publisher thread sends asynchronously; give it time to hand the batches to ZMQ and the buffer.
    time.sleep(1.0)
    print(f"published {len(batches)}", flush=True)
    stdin_closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
    while not stdin_closed.wait(0.3):
        publisher.publish(kv.KVEventBatch(ts=time.time(), events=[stored([31, 32], 2000)]))
    publisher.shutdown()

if __name__ == "__main__":
    main()
