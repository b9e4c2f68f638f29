"""Realistic sample records: what the demo job, `produce-demo` and the benchmarks write.

Values are JSON-like events of 100-1000 bytes (semi-compressible, like real telemetry),
keys are user ids, and each record carries one header; batches hold `batch_size` records.
Deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from engine.records.builder import RecordBatchBuilder
from engine.records.types import CompressionType

__all__ = ["sample_value", "sample_batches"]

_WORDS = ("checkout", "search", "login", "view", "cart", "payment", "refund", "signup",
          "click", "scroll", "error", "retry", "timeout", "ok", "eu-west", "us-east")


def sample_value(rng: random.Random, size: int) -> bytes:
    """A JSON-ish event padded to exactly `size` bytes."""
    head = (f'{{"user":{rng.randrange(1_000_000)},"event":"{rng.choice(_WORDS)}",'
            f'"region":"{rng.choice(_WORDS)}","ms":{rng.randrange(10_000)},'
            f'"score":{rng.random():.6f},"tags":[').encode()
    body = bytearray(head)
    while len(body) < size - 2:
        body += f'"{rng.choice(_WORDS)}-{rng.randrange(100_000):05d}",'.encode()
    body = body[: max(size - 2, 0)] + b"]}"
    return bytes(body[:size])


def sample_batches(num_records: int, compression: CompressionType | int = CompressionType.NONE,
                   *, batch_size: int = 100, base_offset: int = 0, seed: int = 1,
                   start_timestamp: int = 1_700_000_000_000, min_value: int = 100,
                   max_value: int = 1000, partition_leader_epoch: int = 0) -> Iterator[bytes]:
    """Yields v2 batches of `batch_size` records until `num_records` are written."""
    rng = random.Random(seed)
    offset = base_offset
    ts = start_timestamp
    left = num_records
    while left > 0:
        n = min(batch_size, left)
        builder = RecordBatchBuilder(base_offset=offset, compression_type=compression,
                                     partition_leader_epoch=partition_leader_epoch)
        for _ in range(n):
            ts += rng.randrange(0, 5)
            builder.append(sample_value(rng, rng.randint(min_value, max_value)),
                           key=b"user-%d" % rng.randrange(100_000),
                           headers=(("trace-id", b"%016x" % rng.getrandbits(64)),),
                           timestamp=ts)
        yield builder.build()
        offset += n
        left -= n
