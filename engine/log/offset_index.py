"""Kafka's offset index (`<base offset>.index`): offset -> byte position in the segment.

Layout (Kafka's `OffsetIndex`), no header, big-endian, entries of 8 bytes:

    relativeOffset int32   offset - segment base offset
    position       int32   byte position of a batch in the `.log` file

Offsets increase strictly. `LogSegment.append` (and recovery) add an entry (last offset of the
batches appended, position where they start) once more than `index.interval.bytes` (default
4096) were written since the previous entry, so the first batch never gets one.

Lookups answer "where to start reading for offset T": the entry with the largest offset <= T,
or (base offset, 0) if there is none. The searches run in native code with the GIL released;
see `engine._native.index`.
"""

from __future__ import annotations

import struct

import numpy as np

from engine._native.index import (
    STATUS_OFFSET_INDEX_FULL,
    STATUS_OFFSET_NOT_INCREASING,
    STATUS_OFFSET_OVERFLOW,
    STATUS_POSITION_OVERFLOW,
    OffsetIndexCore,
    OffsetPosition,
    append_status_message,
    status_error,
)
from engine.errors import CorruptIndexError, InvalidOffsetError
from engine.log._abstract_index import INT32_MAX, AbstractIndex

__all__ = ["OFFSET_ENTRY_DTYPE", "OFFSET_INDEX_FILE_DTYPE", "OffsetIndex", "OffsetPosition"]

#: One entry as `entries_array()` returns it (absolute offsets).
OFFSET_ENTRY_DTYPE = np.dtype([("offset", np.int64), ("position", np.int64)])
#: One entry as stored in the file.
OFFSET_INDEX_FILE_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_ENTRY = struct.Struct(">ii")


class OffsetIndex(AbstractIndex, OffsetIndexCore):
    """A memory-mapped offset index (Kafka's `OffsetIndex`).

    Construct with `OffsetIndex(file, base_offset, max_index_size=10485760, writable=True)`
    (see `AbstractIndex.__init__`) or `OffsetIndex.from_buffer(buffer, base_offset)`.

    Searches (from `OffsetIndexCore`, GIL released, safe from any thread):
        lookup(offset) -> OffsetPosition; lookup_many(offsets) -> (offsets, positions);
        slot_for(offset) -> int; slots_for(offsets) -> int64 array; entry(n) -> OffsetPosition;
        fetch_upper_bound_offset(start_position, fetch_size) -> OffsetPosition | None;
        last_offset; entries; base_offset.
    """

    ENTRY_SIZE = _ENTRY.size
    KIND = "offset index"

    def append(self, offset: int, position: int) -> None:
        """Appends entry (offset, position) (Kafka's OffsetIndex.append).

        Raises:
            IndexFullError: no free slot (the segment should have rolled).
            InvalidOffsetError: offset not above the last entry's, or offset - base offset
                outside [0, 2**31 - 1].
            ValueError: position outside [0, 2**31 - 1].
            io.UnsupportedOperation: read-only index.
        """
        with self._lock:
            self._require_writable("append")
            try:
                status = self._append_entry(offset, position)
            except OverflowError:  # beyond int64: no field can hold it
                self._relative_offset(offset, InvalidOffsetError)
                raise ValueError(f"position {position} outside [0, {INT32_MAX}] for offset "
                                 f"{offset} in {self.KIND} {self._file}") from None
            if status:
                self._raise_append(status, offset, position, self.entries)

    def append_entries(self, offsets, positions) -> None:
        """`append` of every (offsets[i], positions[i]) in one native step (int64 arrays),
        all or nothing: recovery writes a rebuilt index this way. Raises as `append`, naming
        the first entry that does not fit."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        with self._lock:
            self._require_writable("append")
            status, failed = self._append_entries(offsets, positions)
            if status:
                n = self.entries + failed
                self._raise_append(status, int(offsets[failed]), int(positions[failed]), n,
                                   int(offsets[failed - 1]) if failed else self.last_offset)

    def _raise_append(self, status: int, offset: int, position: int, slot: int,
                      last: int | None = None) -> None:
        if status == STATUS_OFFSET_OVERFLOW:
            self._relative_offset(offset, InvalidOffsetError)  # raises with the details
        if status == STATUS_OFFSET_INDEX_FULL:
            message = (f"cannot append to full {self.KIND} {self._file}: {slot} entries of "
                       f"{self.max_entries}")
        elif status == STATUS_OFFSET_NOT_INCREASING:
            last = self.last_offset if last is None else last
            message = (f"cannot append offset {offset} at slot {slot} of {self.KIND} "
                       f"{self._file}: not above the last offset {last}")
        elif status == STATUS_POSITION_OVERFLOW:
            message = (f"position {position} outside [0, {INT32_MAX}] for offset {offset} in "
                       f"{self.KIND} {self._file}")
        else:
            message = (f"cannot append offset {offset} at slot {slot} of {self.KIND} "
                       f"{self._file}: {append_status_message(status)}")
        raise status_error(status, message, file=self._file, position=slot * self.ENTRY_SIZE,
                           offset=offset)

    def sanity_check(self) -> None:
        """Kafka's checks on a loaded offset index.

        Raises:
            CorruptIndexError: entries whose last offset is not above the base offset, or a
                file size that is not a multiple of 8. Names the file, position and values.
        """
        n = self.entries
        if n and self.last_offset <= self.base_offset:
            raise CorruptIndexError(
                f"corrupt {self.KIND} {self._file}: {n} entries but the last offset "
                f"{self.last_offset} is not above the base offset {self.base_offset}",
                file=self._file, position=(n - 1) * self.ENTRY_SIZE, offset=self.last_offset)
        if self.length % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"corrupt {self.KIND} {self._file}: size {self.length} bytes is not a "
                f"multiple of the {self.ENTRY_SIZE}-byte entry size", file=self._file,
                position=self.length)

    def entries_array(self) -> np.ndarray:
        """A copy of the entries as an OFFSET_ENTRY_DTYPE array (absolute offsets)."""
        raw = self._raw_entries(OFFSET_INDEX_FILE_DTYPE)
        out = np.empty(len(raw), dtype=OFFSET_ENTRY_DTYPE)
        out["offset"] = raw["relative_offset"].astype(np.int64) + self.base_offset
        out["position"] = raw["position"]
        return out
