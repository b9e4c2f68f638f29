"""Kafka's transaction index (`<base offset>.txnindex`): aborted transactions of a segment.

One entry per transaction whose ABORT marker lands in the segment; created on the first
append, append-only, never preallocated. Layout (Kafka's `AbortedTxn`), 34 bytes, big-endian:

    offset 0   version            int16  0. Quirk kept from Kafka: readers look only at the
                                         first byte (a signed byte) and reject values > 0.
    offset 2   producerId         int64
    offset 10  firstOffset        int64  first offset of the transaction (may lie in an
                                         earlier segment)
    offset 18  lastOffset         int64  offset of the ABORT marker; strictly increasing
    offset 26  lastStableOffset   int64  last stable offset when the abort completed

`collect_aborted_txns(fetch_offset, upper_bound_offset)` returns the entries a fetch of
[fetch_offset, upper_bound_offset) must report, and whether the search is complete (no later
segment can add any).

Readers ignore a torn entry at the end of the file (a crash mid-append), as Kafka's do; unlike
Kafka, an append replaces it instead of writing after it, so later entries stay aligned.

Thread-safety: every method takes an internal lock; the file is opened per operation.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import CorruptIndexError, InvalidOffsetError

__all__ = [
    "ABORTED_TXN_DTYPE",
    "ABORTED_TXN_SIZE",
    "ABORTED_TXN_VERSION",
    "AbortedTxn",
    "TransactionIndex",
    "TxnIndexSearchResult",
]

ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ENTRY.size  # 34
#: One entry as stored in the file (numpy packs the fields: itemsize 34).
ABORTED_TXN_DTYPE = np.dtype([
    ("version", ">i2"), ("producer_id", ">i8"), ("first_offset", ">i8"),
    ("last_offset", ">i8"), ("last_stable_offset", ">i8"),
])


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction (Kafka's AbortedTxn). Offsets are absolute."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def to_bytes(self) -> bytes:
        """The 34-byte entry (version written as an int16)."""
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)

    def as_aborted_transaction(self) -> tuple[int, int]:
        """(producer_id, first_offset): what a Fetch response reports."""
        return self.producer_id, self.first_offset


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Result of `collect_aborted_txns`: matching entries, and whether the search may stop
    here (an entry's last stable offset reached the upper bound)."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """A segment's transaction index (Kafka's `TransactionIndex`).

    Args:
        start_offset: the segment's base offset; entries must end at or after it.
        file: path of the `.txnindex` file (it need not exist).
    """

    def __init__(self, start_offset: int, file):
        self._start_offset = int(start_offset)
        self._file = Path(file)
        self._lock = threading.RLock()
        self._last_offset: int | None = None
        self._last_offset_known = False

    @property
    def file(self) -> Path:
        return self._file

    @property
    def start_offset(self) -> int:
        return self._start_offset

    def append(self, txn: AbortedTxn) -> None:
        """Appends an entry, creating the file if needed.

        Raises InvalidOffsetError if txn.last_offset is not above the last entry's (entries
        already in the file count too: Kafka checks only appends since opening).
        """
        with self._lock:
            last = self._known_last_offset()
            if last is not None and txn.last_offset <= last:
                raise InvalidOffsetError(
                    f"cannot append aborted transaction {txn} to transaction index {self._file}: "
                    f"last offset {txn.last_offset} is not above the current last offset {last}",
                    file=self._file, offset=txn.last_offset)
            data = txn.to_bytes()
            with open(self._file, "ab") as f:
                size = f.tell()
                if size % ABORTED_TXN_SIZE:  # a torn entry at the end (crash): replace it
                    f.truncate(size - size % ABORTED_TXN_SIZE)
                f.write(data)
            self._last_offset = txn.last_offset
            self._last_offset_known = True

    def _known_last_offset(self) -> int | None:
        if not self._last_offset_known:
            entries = self._entries()
            self._last_offset = int(entries["last_offset"][-1]) if len(entries) else None
            self._last_offset_known = True
        return self._last_offset

    def _entries(self) -> np.ndarray:
        """Every whole entry in the file (a torn tail is ignored, as Kafka's reader does)."""
        try:
            data = self._file.read_bytes()
        except FileNotFoundError:
            return np.empty(0, dtype=ABORTED_TXN_DTYPE)
        count = len(data) // ABORTED_TXN_SIZE
        return np.frombuffer(data, dtype=ABORTED_TXN_DTYPE, count=count)

    def _check_versions(self, entries: np.ndarray) -> None:
        # Kafka reads only the first byte of the int16 version, as a signed byte.
        first_byte = (entries["version"].astype(np.int32) >> 8).astype(np.int8)
        bad = np.flatnonzero(first_byte > ABORTED_TXN_VERSION)
        if len(bad):
            i = int(bad[0])
            raise CorruptIndexError(
                f"unexpected aborted transaction version {int(first_byte[i])} in transaction "
                f"index {self._file} (entry {i}); the current version is {ABORTED_TXN_VERSION}",
                file=self._file, position=i * ABORTED_TXN_SIZE,
                offset=int(entries["last_offset"][i]))

    @staticmethod
    def _txn(row) -> AbortedTxn:
        return AbortedTxn(int(row["producer_id"]), int(row["first_offset"]),
                          int(row["last_offset"]), int(row["last_stable_offset"]),
                          int(np.int8(int(row["version"]) >> 8)))

    def entries_array(self) -> np.ndarray:
        """A copy of every entry as an ABORTED_TXN_DTYPE array (versions checked)."""
        with self._lock:
            entries = self._entries()
            self._check_versions(entries)
            return entries.copy()

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry, in file order. CorruptIndexError on a version above 0."""
        return [self._txn(row) for row in self.entries_array()]

    def collect_aborted_txns(self, fetch_offset: int,
                             upper_bound_offset: int) -> TxnIndexSearchResult:
        """Entries with last_offset >= fetch_offset and first_offset < upper_bound_offset,
        scanning in order and stopping (complete) after the first entry whose
        last_stable_offset >= upper_bound_offset. CorruptIndexError on a bad version among
        the entries scanned."""
        with self._lock:
            entries = self._entries()
            stops = np.flatnonzero(entries["last_stable_offset"] >= upper_bound_offset)
            complete = len(stops) > 0
            scanned = entries[: int(stops[0]) + 1] if complete else entries
            self._check_versions(scanned)
            hits = scanned[(scanned["last_offset"] >= fetch_offset)
                           & (scanned["first_offset"] < upper_bound_offset)]
            return TxnIndexSearchResult([self._txn(row) for row in hits], complete)

    def sanity_check(self) -> None:
        """Kafka's check: every entry's last offset is >= the segment's start offset.

        Raises CorruptIndexError naming the file, the entry's position and offset.
        """
        with self._lock:
            entries = self._entries()
            self._check_versions(entries)
            bad = np.flatnonzero(entries["last_offset"] < self._start_offset)
            if len(bad):
                i = int(bad[0])
                raise CorruptIndexError(
                    f"corrupt transaction index {self._file}: last offset "
                    f"{int(entries['last_offset'][i])} of {self._txn(entries[i])} is below the "
                    f"start offset {self._start_offset}", file=self._file,
                    position=i * ABORTED_TXN_SIZE, offset=int(entries["last_offset"][i]))

    def truncate_to(self, offset: int) -> None:
        """Drops the first entry whose last_offset >= offset and everything after it."""
        with self._lock:
            entries = self._entries()
            cut = np.flatnonzero(entries["last_offset"] >= offset)
            if not len(cut):
                return
            keep = int(cut[0])
            with open(self._file, "r+b") as f:
                f.truncate(keep * ABORTED_TXN_SIZE)
            self._last_offset = int(entries["last_offset"][keep - 1]) if keep else None
            self._last_offset_known = True

    def reset(self) -> None:
        """Drops every entry (the file, if any, becomes empty)."""
        with self._lock:
            if self._file.exists():
                with open(self._file, "r+b") as f:
                    f.truncate(0)
            self._last_offset = None
            self._last_offset_known = True

    def is_empty(self) -> bool:
        """True if no whole entry exists."""
        with self._lock:
            return len(self._entries()) == 0

    def flush(self) -> None:
        """fsyncs the file if it exists."""
        with self._lock:
            try:
                fd = os.open(self._file, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete_if_exists(self) -> bool:
        """Deletes the file; returns whether it existed."""
        with self._lock:
            try:
                os.unlink(self._file)
            except FileNotFoundError:
                return False
            self._last_offset, self._last_offset_known = None, True
            return True

    def rename_to(self, file) -> None:
        """Renames the file (if it exists) atomically and remembers the new path."""
        with self._lock:
            try:
                os.replace(self._file, file)
            except FileNotFoundError:
                pass
            self._file = Path(file)

    def close(self) -> None:
        """Nothing stays open between operations; kept for Kafka's lifecycle."""

    def __repr__(self):
        return f"TransactionIndex(start_offset={self._start_offset}, file={str(self._file)!r})"
