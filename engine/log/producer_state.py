"""Producer state of a partition (`ProducerStateManager`) and its snapshots
(`<20-digit offset>.snapshot`), read and written byte-exactly.

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
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np

from engine.common import fsync_dir, write_file_atomically
from engine.errors import CorruptSnapshotError
from engine.log.transaction_index import AbortedTxn

__all__ = [
    "NO_PRODUCER_ID",
    "SNAPSHOT_SUFFIX",
    "CompletedTxn",
    "ProducerStateEntry",
    "ProducerStateManager",
    "apply_batches",
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


# ---- producer state ------------------------------------------------------------------------

NO_PRODUCER_ID = -1
_INT32_MAX = 2**31 - 1


@dataclass(slots=True)
class ProducerStateEntry:
    """One producer's state (Kafka's ProducerStateEntry, with only the last batch kept:
    what a snapshot stores). `current_txn_first_offset` is -1 outside a transaction."""

    producer_id: int
    producer_epoch: int = -1
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    def to_snapshot_entry(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(self.producer_id, self.producer_epoch, self.last_sequence,
                                     self.last_offset, self.offset_delta, self.last_timestamp,
                                     self.coordinator_epoch, self.current_txn_first_offset)

    @classmethod
    def from_snapshot_entry(cls, e: ProducerSnapshotEntry) -> ProducerStateEntry:
        return cls(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset,
                   e.offset_delta, e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT or ABORT marker at `last_offset` (Kafka's
    CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def _increment_sequence(sequence: int, increment: int) -> int:
    # Kafka's DefaultRecordBatch.incrementSequence: sequences wrap from int32 max to 0.
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


class ProducerStateManager:
    """The producers of one partition and their ongoing transactions (the parts of Kafka's
    ProducerStateManager a log and the tiering need: snapshots, the first unstable offset,
    completed transactions for the transaction index). Not thread-safe: the owning log
    serializes calls. Sequence and epoch validation of appends is not done here.

    Args:
        log_dir: the partition directory, where `<offset>.snapshot` files live.
    """

    def __init__(self, log_dir):
        self.log_dir = Path(log_dir)
        self.producers: dict[int, ProducerStateEntry] = {}
        #: first offset -> producer id of every open transaction, in offset order.
        self._ongoing: dict[int, int] = {}
        #: the offset up to which (exclusive) batches have been applied.
        self.map_end_offset = 0
        #: snapshots written with sync=False since the last `sync_snapshots`.
        self._unsynced: set[Path] = set()

    # -- updates ---------------------------------------------------------------------------

    def reset(self, offset: int = 0) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self.map_end_offset = int(offset)

    def update(self, producer_id: int, producer_epoch: int, base_sequence: int,
               base_offset: int, last_offset: int, max_timestamp: int,
               is_transactional: bool) -> None:
        """Applies a data batch (Kafka's ProducerAppendInfo.append without validation)."""
        if producer_id != NO_PRODUCER_ID:
            entry = self.producers.get(producer_id)
            if entry is None:
                entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
            if producer_epoch != entry.producer_epoch:
                entry.producer_epoch = producer_epoch
            delta = last_offset - base_offset
            entry.last_sequence = (_increment_sequence(base_sequence, delta)
                                   if base_sequence >= 0 else -1)
            entry.last_offset = last_offset
            entry.offset_delta = delta
            entry.last_timestamp = max_timestamp
            if is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = base_offset
                self._ongoing[base_offset] = producer_id
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)

    def end_txn(self, producer_id: int, producer_epoch: int, offset: int, timestamp: int,
                coordinator_epoch: int, is_abort: bool) -> CompletedTxn | None:
        """Applies a COMMIT/ABORT marker at `offset`. Returns the transaction it completes
        (None when the producer had none open, e.g. a retried marker). Call
        `complete_txn` after recording it (its last stable offset comes from
        `last_stable_offset_of`)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        entry.producer_epoch = producer_epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        self.map_end_offset = max(self.map_end_offset, offset + 1)
        if first < 0:
            return None
        return CompletedTxn(producer_id, first, offset, is_abort)

    def last_stable_offset_of(self, txn: CompletedTxn) -> int:
        """The LSO once `txn` completes: the first offset of the earliest other open
        transaction, else the offset after its marker (Kafka's lastStableOffset)."""
        for first, producer_id in sorted(self._ongoing.items()):
            if producer_id != txn.producer_id:
                return first
        return txn.last_offset + 1

    def complete_txn(self, txn: CompletedTxn) -> None:
        self._ongoing.pop(txn.first_offset, None)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, None when none is open."""
        return min(self._ongoing) if self._ongoing else None

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of every open transaction, by offset."""
        return sorted(self._ongoing.items())

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_entries(self) -> list[ProducerSnapshotEntry]:
        """Every producer's entry, by producer id."""
        return [self.producers[p].to_snapshot_entry() for p in sorted(self.producers)]

    def take_snapshot(self, offset: int | None = None, *, sync: bool = True) -> Path:
        """Writes `<offset>.snapshot` (default: `map_end_offset`) with every producer."""
        offset = self.map_end_offset if offset is None else int(offset)
        path = snapshot_file(self.log_dir, offset)
        write_snapshot(path, self.snapshot_entries(), sync=sync)
        if not sync:
            self._unsynced.add(path)
        return path

    def sync_snapshots(self) -> None:
        """fsyncs the snapshots written with sync=False since the last call (those deleted
        meanwhile are skipped), then the directory (Kafka flushes a roll's snapshot with
        the log's next flush)."""
        for path in sorted(self._unsynced):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted with its segment, or by a truncation
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self._unsynced:
            fsync_dir(self.log_dir)
        self._unsynced.clear()

    def load_snapshot(self, path) -> None:
        """Replaces the state with a snapshot's (CorruptSnapshotError if it is damaged)."""
        entries = read_snapshot(path)
        self.reset(offset_from_snapshot_file(path))
        for e in entries:
            entry = ProducerStateEntry.from_snapshot_entry(e)
            self.producers[e.producer_id] = entry
            if entry.current_txn_first_offset >= 0:
                self._ongoing[entry.current_txn_first_offset] = e.producer_id

    def snapshot_files(self) -> list[tuple[int, Path]]:
        return list_snapshot_files(self.log_dir)

    def delete_snapshot(self, offset: int) -> bool:
        try:
            os.unlink(snapshot_file(self.log_dir, offset))
            return True
        except FileNotFoundError:
            return False

    def delete_snapshots_after(self, offset: int) -> None:
        """Deletes the snapshots of offsets above `offset` (the log was truncated)."""
        for found, path in self.snapshot_files():
            if found > offset:
                path.unlink(missing_ok=True)


def _end_txn_marker(data, row) -> tuple[bool, int] | None:
    """(is ABORT, coordinator epoch) of a control batch, None for other control types
    (KRaft's) or a control batch without records."""
    from engine.records import MemoryRecords
    from engine.records.control import ControlRecordType, parse_control_record

    pos, size = int(row["position"]), int(row["size"])
    batch = next(MemoryRecords(memoryview(data)[pos:pos + size]).batches())
    record = next(iter(batch.records()), None)
    if record is None:
        return None
    control = parse_control_record(record.key, record.value)
    if control.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    return control.type is ControlRecordType.ABORT, int(control.coordinator_epoch)


def apply_batches(state: ProducerStateManager, data, headers,
                  on_aborted: Callable[[AbortedTxn], None] | None = None) -> None:
    """Applies whole batches to `state` in order (`headers` are their scan rows, positions
    indexing `data`): data batches with a producer id update their producer, COMMIT/ABORT
    markers complete transactions, and each aborted one is passed to `on_aborted` as the
    transaction index records it (with the last stable offset at its completion)."""
    if not len(headers):
        return
    for j in np.flatnonzero(headers["producer_id"] != NO_PRODUCER_ID):
        row = headers[j]
        producer_id = int(row["producer_id"])
        if not row["is_control"]:
            state.update(producer_id, int(row["producer_epoch"]), int(row["base_sequence"]),
                         int(row["base_offset"]), int(row["last_offset"]),
                         int(row["max_timestamp"]), bool(row["is_transactional"]))
            continue
        marker = _end_txn_marker(data, row)
        if marker is None:
            continue
        completed = state.end_txn(producer_id, int(row["producer_epoch"]),
                                  int(row["base_offset"]), int(row["max_timestamp"]),
                                  marker[1], marker[0])
        if completed is None:
            continue
        if completed.is_aborted and on_aborted is not None:
            on_aborted(AbortedTxn(completed.producer_id, completed.first_offset,
                                  completed.last_offset, state.last_stable_offset_of(completed)))
        state.complete_txn(completed)
    state.map_end_offset = max(state.map_end_offset, int(headers["last_offset"][-1]) + 1)
