"""vLLM's own KV-event publisher, without an engine: `vllm.distributed.kv_events.ZmqEventPublisher` and
its event classes publish batches the way a vLLM engine does, for tests of epp's subscriber and replay
against the real thing (tests/e2e_vllm/publisher.rs; run in .venv-vllm, see `make vllm`).

Usage: vllm-kv-publisher.py ENDPOINT REPLAY_ENDPOINT TOPIC BLOCK_SIZE

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
subscriber that connects later replays all five.
"""
import sys
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


def main() -> None:
    endpoint, replay, topic, block_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    publisher = ZmqEventPublisher(
        data_parallel_rank=0, endpoint=endpoint, replay_endpoint=replay, topic=topic
    )
    big = (1 << 64) - 5
    int_hashes = [11, 12, 13, big]
    stored_a = BlockStored(
        block_hashes=int_hashes,
        parent_block_hash=None,
        token_ids=list(range(4 * block_size)),
        block_size=block_size,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )
    byte_hashes = [bytes(24) + i.to_bytes(8, "big") for i in (21, 22)]
    stored_b = BlockStored(
        block_hashes=byte_hashes,
        parent_block_hash=None,
        token_ids=list(range(1000, 1000 + 2 * block_size)),
        block_size=block_size,
        lora_id=None,
        medium="CPU",
        lora_name=None,
    )
    removed = BlockRemoved(block_hashes=[big], medium="GPU")
    for events in ([stored_a], [stored_b], [removed]):
        publisher.publish(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0))
    stored_c = BlockStored(
        block_hashes=[31, 32],
        parent_block_hash=None,
        token_ids=list(range(2000, 2000 + 2 * block_size)),
        block_size=block_size,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )
    publisher.publish(MapEventBatch(ts=time.time(), events=[stored_c], data_parallel_rank=0))
    stored_d = ArrayBlockStored(
        block_hashes=[41, 42],
        parent_block_hash=None,
        token_ids=list(range(3000, 3000 + 2 * block_size)),
        block_size=block_size,
        lora_id=None,
        medium="GPU",
        lora_name=None,
    )
    publisher.publish(KVEventBatch(ts=time.time(), events=[stored_d], data_parallel_rank=0))
    # The publisher thread sends asynchronously; give it time to hand the batches to ZMQ and the buffer.
    time.sleep(1.0)
    print("published 5", flush=True)
    sys.stdin.read()
    publisher.shutdown()


if __name__ == "__main__":
    main()
