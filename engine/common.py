"""Small basics every layer above the record format shares (Kafka's `org.apache.kafka.common`).

- `Uuid`: Kafka's 16-byte Uuid (topic ids, remote segment ids) and its base64url text form.
- `TopicPartition`: a topic name and partition number.
- `fsync_dir`, `write_file_atomically`: Kafka's write-then-atomic-rename of small files
  (checkpoints, manifests, cache entries): the data is fsynced, renamed over the file and the
  directory is fsynced, so a crash leaves the old file or the new one, never a torn one.

They live here, below `engine.log` and `engine.remote`, so the remote tier and the Spark
readers use them without importing the local log. Thread-safety: `Uuid` and `TopicPartition`
are immutable; the functions hold no state.
"""

from __future__ import annotations

import base64
import os
import re
import uuid as _uuid
from pathlib import Path
from typing import NamedTuple

__all__ = ["TopicPartition", "Uuid", "fsync_dir", "write_file_atomically"]


# ---- atomic writes ------------------------------------------------------------------------

def fsync_dir(path) -> None:
    """fsyncs a directory so a rename inside it is durable (no-op where unsupported)."""
    if os.name == "nt":
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path, data: bytes, *, sync: bool = True) -> None:
    """Writes `data` to `<path>.tmp`, fsyncs it, renames it over `path` and fsyncs the
    directory (Kafka's write-then-Utils.atomicMoveWithFallback). `sync=False` skips both
    fsyncs. On error the temporary file is removed and `path` is untouched."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(path.parent)


# ---- topic partitions and Uuid ---------------------------------------------------------

class TopicPartition(NamedTuple):
    """A topic name and partition number (compares equal to the plain tuple)."""

    topic: str
    partition: int


class Uuid:
    """Kafka's Uuid: 16 bytes, written as URL-safe base64 without padding (22 characters).

    Immutable and hashable. `Uuid(most_significant_bits, least_significant_bits)` takes the
    two 64-bit halves (signed or unsigned); `from_string`, `from_bytes` and `random` build
    one otherwise.
    """

    __slots__ = ("_bytes",)
    _bytes: bytes  # set once in __init__ through object.__setattr__
    ZERO: Uuid
    METADATA_TOPIC_ID: Uuid

    def __init__(self, most_significant_bits: int, least_significant_bits: int):
        for half in (most_significant_bits, least_significant_bits):
            if not -(2**63) <= half < 2**64:
                raise ValueError(f"Uuid half {half} does not fit 64 bits")
        mask = 2**64 - 1
        value = ((most_significant_bits & mask) << 64) | (least_significant_bits & mask)
        object.__setattr__(self, "_bytes", value.to_bytes(16, "big"))

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Uuid:
        """The Uuid of 16 big-endian bytes (ValueError for another length)."""
        data = bytes(data)
        if len(data) != 16:
            raise ValueError(f"a Uuid has 16 bytes, got {len(data)}")
        return cls(int.from_bytes(data[:8], "big"), int.from_bytes(data[8:], "big"))

    @classmethod
    def from_string(cls, text: str) -> Uuid:
        """Parses the base64url form (22 characters, or 24 with `==` padding).
        ValueError for anything else."""
        if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9_-]{22}(==)?", text):
            raise ValueError(f"{text!r} is not a base64url-encoded 16-byte Uuid")
        return cls.from_bytes(base64.urlsafe_b64decode(text[:22] + "=="))

    @classmethod
    def random(cls) -> Uuid:
        """A random (version 4) Uuid that is neither ZERO nor METADATA_TOPIC_ID and whose
        string does not start with '-' (Kafka's Uuid.randomUuid rules). One draw in 64 is
        refused, so 64 draws all refused would mean a broken random source."""
        for _ in range(64):
            candidate = cls.from_bytes(_uuid.uuid4().bytes)
            if candidate not in (cls.ZERO, cls.METADATA_TOPIC_ID) \
                    and not str(candidate).startswith("-"):
                return candidate
        raise RuntimeError("64 random Uuids in a row were refused: the random source is broken")

    @property
    def most_significant_bits(self) -> int:
        """The first 8 bytes as a signed int64 (Java's getMostSignificantBits)."""
        return int.from_bytes(self._bytes[:8], "big", signed=True)

    @property
    def least_significant_bits(self) -> int:
        """The last 8 bytes as a signed int64 (Java's getLeastSignificantBits)."""
        return int.from_bytes(self._bytes[8:], "big", signed=True)

    def __bytes__(self) -> bytes:
        return self._bytes

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self._bytes).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Uuid) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __setattr__(self, name, value):
        raise AttributeError("Uuid is immutable")

    def __reduce__(self):
        return (Uuid.from_bytes, (self._bytes,))


Uuid.ZERO = Uuid(0, 0)
Uuid.METADATA_TOPIC_ID = Uuid(0, 1)
