"""Checksums and hashes of Kafka's formats, computed natively (`engine._native.crc`).

- `crc32c`: CRC-32C (Castagnoli), the checksum of v2 record batches (over bytes [21, end))
  and of producer-state snapshots.
- `crc32`: CRC-32 (IEEE, java.util.zip.CRC32), the checksum of legacy magic 0/1 messages.
- `xxh32`: XXH32, the LZ4 frame header and content checksum.
- `murmur2`, `to_positive`, `partition_for_key`: Kafka's default partitioner.

Every function takes any C-contiguous buffer (bytes, bytearray, memoryview, mmap, numpy
array) without copying it, is thread-safe, and releases the GIL for inputs of 4 KiB or more.
Non-buffers raise TypeError; non-contiguous buffers raise BufferError or the exporter's error.
"""

from engine._native.crc import (
    ImplementationUnavailableError,
    crc32,
    crc32c,
    crc32c_combine,
    crc32c_implementation,
    crc32c_implementations,
    murmur2,
    xxh32,
)

__all__ = [
    "ImplementationUnavailableError",
    "crc32",
    "crc32c",
    "crc32c_combine",
    "crc32c_implementation",
    "crc32c_implementations",
    "murmur2",
    "partition_for_key",
    "to_positive",
    "xxh32",
]

_INT31_MASK = 0x7FFFFFFF


def to_positive(n: int) -> int:
    """Kafka's Utils.toPositive: `n` with its sign bit cleared (n & 0x7fffffff), in 0..2**31-1.

    Not abs(): to_positive(-1) == 2**31 - 1, and to_positive(-2**31) == 0. Bits above the
    31st are dropped, as Java's int would have dropped them.
    """
    return n & _INT31_MASK


def partition_for_key(key_bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with this serialized key:
    toPositive(murmur2(key)) % numPartitions (BuiltInPartitioner.partitionForKey).

    `key_bytes` is the serialized key (any C-contiguous buffer); a null key has no hash
    partition (Kafka uses sticky partitioning instead), so None raises TypeError.
    Raises ValueError when num_partitions < 1. Thread-safe.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
    if key_bytes is None:
        raise TypeError("a null key has no hash partition; pass the serialized key bytes")
    return to_positive(murmur2(key_bytes)) % num_partitions
