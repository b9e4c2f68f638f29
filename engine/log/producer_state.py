"""Producer-state snapshots (`<20-digit offset>.snapshot`), read and written byte-exactly.

Kafka writes one when a segment rolls (named by the new segment's base offset) and at clean
shutdown. Layout (the `ProducerSnapshot` message, version 1, non-flexible), big-endian:

    offset 0   version  int16   1
    offset 2   crc      uint32  CRC-32C of bytes [6, end)
    offset 6   count    int32   number of entries
    offset 10  entries, 46 bytes each:
        producerId int64, epoch int16, lastSequence int32, lastOffset int64,
        offsetDelta int32 (lastSeq - firstSeq of the last batch),
        timestamp int64 (max timestamp of the last batch), coordinatorEpoch int32,
        currentTxnFirstOffset int64 (-1 when no transaction is open)

An empty snapshot is the 10 bytes `00 01 48 67 4b c7 00 00 00 00`.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from pathlib import Path

from engine.errors import CorruptSnapshotError
from engine.log.checkpoint import write_file_atomically

__all__ = [
    "SNAPSHOT_SUFFIX",
    "SNAPSHOT_VERSION",
    "ProducerSnapshotEntry",
    "decode_snapshot",
    "encode_snapshot",
    "list_snapshot_files",
    "offset_from_snapshot_file",
    "read_snapshot",
    "snapshot_file",
    "write_snapshot",
]

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_HEADER = struct.Struct(">hIi")              # version, crc, count
_CRC_END = 6                                  # the CRC covers [6, end)
_ENTRY = struct.Struct(">qhiqiqiq")           # 46 bytes
_NAME = re.compile(r"^(\d{20})\.snapshot$")


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's state in a snapshot (Kafka's ProducerSnapshot.ProducerEntry)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def _crc32c(data) -> int:
    from engine.checksums import crc32c  # native module; imported on use

    return crc32c(data)


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The snapshot file's bytes for `entries`, in the given order.

    Raises ValueError if a field does not fit its type (e.g. an epoch above 32767).
    """
    entries = list(entries)
    out = bytearray(_HEADER.size + _ENTRY.size * len(entries))
    for i, entry in enumerate(entries):
        try:
            _ENTRY.pack_into(out, _HEADER.size + i * _ENTRY.size, *astuple(entry))
        except struct.error as exc:
            raise ValueError(f"producer snapshot entry {i} {entry} does not fit the "
                             f"format: {exc}") from None
    struct.pack_into(">i", out, _CRC_END, len(entries))
    crc = _crc32c(memoryview(out)[_CRC_END:])
    struct.pack_into(">hI", out, 0, SNAPSHOT_VERSION, crc)
    return bytes(out)


def decode_snapshot(data, file=None) -> list[ProducerSnapshotEntry]:
    """The entries of a snapshot's bytes.

    Raises:
        CorruptSnapshotError: unknown version, truncated or over-long content, negative
            count, or CRC mismatch. Names `file` (if given), the position and values.
    """
    view = memoryview(data).cast("B")
    size = len(view)
    if size < 2:
        raise CorruptSnapshotError(f"producer snapshot of {size} bytes has no version",
                                   file=file, position=0)
    (version,) = struct.unpack_from(">h", view, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot has unknown version {version}, "
                                   f"expected {SNAPSHOT_VERSION}", file=file, position=0)
    if size < _HEADER.size:
        raise CorruptSnapshotError(f"producer snapshot of {size} bytes is shorter than its "
                                   f"{_HEADER.size}-byte header", file=file, position=size)
    _, stored_crc, count = _HEADER.unpack_from(view, 0)
    if count < 0:
        raise CorruptSnapshotError(f"producer snapshot has entry count {count}, expected >= 0",
                                   file=file, position=_CRC_END)
    expected = _HEADER.size + count * _ENTRY.size
    if size != expected:
        raise CorruptSnapshotError(f"producer snapshot of {size} bytes does not match its "
                                   f"{count} entries ({expected} bytes)", file=file,
                                   position=min(size, expected))
    computed = _crc32c(view[_CRC_END:])
    if computed != stored_crc:
        raise CorruptSnapshotError(f"producer snapshot CRC mismatch: stored {stored_crc:#010x}, "
                                   f"computed {computed:#010x}", file=file, position=2)
    return [ProducerSnapshotEntry(*_ENTRY.unpack_from(view, _HEADER.size + i * _ENTRY.size))
            for i in range(count)]


def read_snapshot(path) -> list[ProducerSnapshotEntry]:
    """Reads and checks a snapshot file (see decode_snapshot for errors)."""
    with open(path, "rb") as f:
        data = f.read()
    return decode_snapshot(data, file=os.fspath(path))


def write_snapshot(path, entries: Iterable[ProducerSnapshotEntry], *, sync: bool = True) -> None:
    """Writes a snapshot: `<path>.tmp`, fsync, atomic rename, fsync of the directory (the
    fsyncs only when `sync`). Kafka writes in place; the bytes are the same."""
    write_file_atomically(path, encode_snapshot(entries), sync=sync)


def snapshot_file(log_dir, offset: int) -> Path:
    """`<log_dir>/<offset as 20 digits>.snapshot`."""
    if offset < 0:
        raise ValueError(f"snapshot offset must be >= 0, got {offset}")
    return Path(log_dir) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def offset_from_snapshot_file(path) -> int:
    """The offset a snapshot file is named after (ValueError for other names)."""
    match = _NAME.match(Path(path).name)
    if not match:
        raise ValueError(f"{path} is not named <20-digit offset>{SNAPSHOT_SUFFIX}")
    return int(match.group(1))


def list_snapshot_files(log_dir) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in `log_dir`, by increasing offset."""
    found = []
    for entry in os.scandir(log_dir):
        match = _NAME.match(entry.name)
        if match and entry.is_file():
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)
