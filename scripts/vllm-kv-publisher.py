"""vLLM's own KV-event publisher, without an engine: `vllm.distributed.kv_events.ZmqEventPublisher` and
its event classes publish batches the way a vLLM engine does, for tests of epp's subscriber and replay
against the real thing (tests/e2e_vllm/publisher.rs; run in .venv-vllm, see `make vllm`).

Usage: vllm-kv-publisher.py ENDPOINT REPLAY_ENDPOINT TOPIC BLOCK_SIZE [keep-publishing]

ENDPOINT with a wildcard host (`tcp://*:port`) is bound, any other is connected to (an EPP's
`zmqEndpoint`); an empty REPLAY_ENDPOINT means no replay socket.

Publishes, one batch each, with the classes' own msgpack encoding (msgspec):
  1. BlockStored, prompt A: 4 blocks of token ids 0.., integer block hashes (one above i64::MAX)
  2. BlockStored, prompt B: 2 blocks of token ids 1000.., 32-byte block hashes (VLLM_KV_EVENTS_USE_INT_
     BLOCK_HASHES=0's form), CPU medium
  3. BlockRemoved: prompt A's last block
  4. BlockStored, prompt C: 2 blocks of token ids 2000.., in a batch encoded as a map (the same fields
     without `array_like`, as one vLLM version declared EventBatch)
  5. BlockStored, prompt D: 2 blocks of token ids 3000.., the event itself a positional array
     (`["BlockStored", ...]`, older vLLM's `array_like` events; this vLLM's events are tagged maps)
then prints "published 5" and keeps the publisher (and its replay socket) alive until stdin closes, so a
subscriber that connects later replays all five. With `keep-publishing`, it also publishes prompt E (2
blocks of token ids 4000..) every 0.3 s until then, as a busy engine keeps publishing.
"""
import sys
import threading
import time

from typing import Any

import msgspec
from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVEventBatch, ZmqEventPublisher


class MapEventBatch(msgspec.Struct, omit_defaults=True):
    """KVEventBatch's fields, encoded as a map."""

    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class ArrayBlockStored(BlockStored, array_like=True, tag="BlockStored"):
    """vLLM's BlockStored, encoded as a positional array after its tag (older vLLM's event form)."""


def stored(cls, hashes, first_token: int, block_size: int, medium: str = "GPU"):
    """A BlockStored (or subclass) of len(hashes) full blocks of consecutive token ids from first_token."""
    return cls(
        block_hashes=hashes,
        parent_block_hash=None,
        token_ids=list(range(first_token, first_token + len(hashes) * block_size)),
        block_size=block_size,
        lora_id=None,
        medium=medium,
        lora_name=None,
    )


def main() -> None:
    endpoint, replay, topic, block_size = sys.argv[1], sys.argv[2] or None, sys.argv[3], int(sys.argv[4])
    keep_publishing = sys.argv[5:] == ["keep-publishing"]
    publisher = ZmqEventPublisher(
        data_parallel_rank=0, endpoint=endpoint, replay_endpoint=replay, topic=topic
    )
    big = (1 << 64) - 5
    stored_a = stored(BlockStored, [11, 12, 13, big], 0, block_size)
    byte_hashes = [bytes(24) + i.to_bytes(8, "big") for i in (21, 22)]
    stored_b = stored(BlockStored, byte_hashes, 1000, block_size, medium="CPU")
    removed = BlockRemoved(block_hashes=[big], medium="GPU")
    for events in ([stored_a], [stored_b], [removed]):
        publisher.publish(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0))
    stored_c = stored(BlockStored, [31, 32], 2000, block_size)
    publisher.publish(MapEventBatch(ts=time.time(), events=[stored_c], data_parallel_rank=0))
    stored_d = stored(ArrayBlockStored, [41, 42], 3000, block_size)
    publisher.publish(KVEventBatch(ts=time.time(), events=[stored_d], data_parallel_rank=0))
    # The publisher thread sends asynchronously; give it time to hand the batches to ZMQ and the buffer.
    time.sleep(1.0)
    print("published 5", flush=True)
    stdin_closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
    while not stdin_closed.wait(0.3):
        if keep_publishing:
            stored_e = stored(BlockStored, [51, 52], 4000, block_size)
            publisher.publish(KVEventBatch(ts=time.time(), events=[stored_e], data_parallel_rank=0))
    publisher.shutdown()


if __name__ == "__main__":
    main()
