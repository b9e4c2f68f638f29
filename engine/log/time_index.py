"""Kafka's time index (`<base offset>.timeindex`): timestamp -> offset.

Layout (Kafka's `TimeIndex`), no header, big-endian, entries of 12 bytes:

    timestamp      int64   milliseconds
    relativeOffset int32   offset - segment base offset

Entry (T, O) means "the largest timestamp seen in this segment up to and including offset O
is T". O is the last offset of the batch that first reached T. Timestamps increase strictly:
`maybe_append` ignores an equal timestamp and refuses a smaller one. The last slot is kept
for the final entry written on roll, close and recovery (`skip_full_check=True`), so the last
entry of a closed segment holds its max timestamp.

Lookups answer "from which offset may records with timestamp >= T start": the entry with the
largest timestamp <= T, or (-1, base offset) if there is none. The searches run in native
code with the GIL released; see `engine._native.index`.
"""

from __future__ import annotations

import struct

import numpy as np

from engine._native.index import (
    STATUS_OFFSET_OVERFLOW,
    STATUS_TIME_DECREASING,
    STATUS_TIME_INDEX_FULL,
    STATUS_TIME_OFFSET_DECREASING,
    TimeIndexCore,
    TimestampOffset,
    append_status_message,
    status_error,
)
from engine.errors import CorruptIndexError, InvalidOffsetError
from engine.log._abstract_index import AbstractIndex

__all__ = ["TIME_ENTRY_DTYPE", "TIME_INDEX_FILE_DTYPE", "TimeIndex", "TimestampOffset"]

#: One entry as `entries_array()` returns it (absolute offsets).
TIME_ENTRY_DTYPE = np.dtype([("timestamp", np.int64), ("offset", np.int64)])
#: One entry as stored in the file.
TIME_INDEX_FILE_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
_ENTRY = struct.Struct(">qi")


class TimeIndex(AbstractIndex, TimeIndexCore):
    """A memory-mapped time index (Kafka's `TimeIndex`).

    Construct with `TimeIndex(file, base_offset, max_index_size=10485760, writable=True)`
    (see `AbstractIndex.__init__`; the file is 10485756 bytes when created with the default)
    or `TimeIndex.from_buffer(buffer, base_offset)`.

    Searches (from `TimeIndexCore`, GIL released, safe from any thread):
        lookup(timestamp) -> TimestampOffset; lookup_many(timestamps) -> (timestamps, offsets);
        slot_for(timestamp) -> int; slots_for(timestamps) -> int64 array;
        entry(n) -> TimestampOffset; last_entry; entries; base_offset.
    """

    ENTRY_SIZE = _ENTRY.size
    KIND = "time index"

    def is_full(self) -> bool:
        """True when only the reserved last slot is free: entries >= max_entries - 1."""
        return self.entries >= self._bound_capacity - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Appends (timestamp, offset) if timestamp is above the last entry's (Kafka's
        TimeIndex.maybeAppend). An equal timestamp is ignored; so is -1 on an empty index.

        Args:
            skip_full_check: write even into the reserved last slot (final entry of a
                segment on roll, close or recovery).

        Raises:
            IndexFullError: the index is full (and skip_full_check is False), or no slot at
                all is left.
            InvalidOffsetError: offset below the last entry's, timestamp below the last
                entry's, or offset - base offset outside [0, 2**31 - 1].
            io.UnsupportedOperation: read-only index.
        """
        with self._lock:
            self._require_writable("append")
            try:
                status = self._maybe_append_entry(timestamp, offset, skip_full_check)
            except OverflowError:  # beyond int64: no field can hold it
                self._relative_offset(offset, InvalidOffsetError)
                raise InvalidOffsetError(f"timestamp {timestamp} does not fit the int64 field "
                                         f"of {self.KIND} {self._file}", file=self._file,
                                         offset=offset) from None
            if status:
                self._raise_append(status, timestamp, offset, self.entries, self.last_entry,
                                   skip_full_check)

    def maybe_append_entries(self, timestamps, offsets, skip_full_check: bool = False) -> None:
        """`maybe_append` of every (timestamps[i], offsets[i]) in turn, in one native step
        (int64 arrays), all or nothing: recovery writes a rebuilt index this way. Raises as
        `maybe_append`, naming the first pair that does not fit."""
        timestamps = np.ascontiguousarray(timestamps, dtype=np.int64)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        with self._lock:
            self._require_writable("append")
            status, failed = self._maybe_append_entries(timestamps, offsets, skip_full_check)
            if status:
                # the pairs before `failed` were checked against one another, not the file:
                # name the last of them that the index would have held
                prev, slot = self.last_entry, self.entries
                for i in range(failed):
                    if timestamps[i] > prev.timestamp:
                        prev = TimestampOffset(int(timestamps[i]), int(offsets[i]))
                        slot += 1
                self._raise_append(status, int(timestamps[failed]), int(offsets[failed]),
                                   slot, prev, skip_full_check)

    def _raise_append(self, status: int, timestamp: int, offset: int, slot: int,
                      last: TimestampOffset, skip_full_check: bool) -> None:
        if status == STATUS_OFFSET_OVERFLOW:
            self._relative_offset(offset, InvalidOffsetError)  # raises with the details
        if status == STATUS_TIME_INDEX_FULL and not skip_full_check:
            message = (f"cannot append to full {self.KIND} {self._file}: {slot} entries of "
                       f"{self.max_entries} (the last slot is reserved)")
        elif status == STATUS_TIME_INDEX_FULL:
            message = f"no slot left in {self.KIND} {self._file}: {slot} entries"
        elif status == STATUS_TIME_OFFSET_DECREASING:
            message = (f"cannot append offset {offset} at slot {slot} of {self.KIND} "
                       f"{self._file}: below the last offset {last.offset}")
        elif status == STATUS_TIME_DECREASING:
            message = (f"cannot append timestamp {timestamp} at slot {slot} of {self.KIND} "
                       f"{self._file}: below the last timestamp {last.timestamp}")
        else:
            message = (f"cannot append offset {offset} at slot {slot} of {self.KIND} "
                       f"{self._file}: {append_status_message(status)}")
        raise status_error(status, message, file=self._file, position=slot * self.ENTRY_SIZE,
                           offset=offset)

    def sanity_check(self) -> None:
        """Kafka's checks on a loaded time index.

        Raises:
            CorruptIndexError: last timestamp below the first, last offset below the base
                offset, or a size that is not a multiple of 12. Names file, position, values.
        """
        n = self.entries
        if n:
            last, first = self.last_entry, self.entry(0)
            where = (n - 1) * self.ENTRY_SIZE
            if last.timestamp < first.timestamp:
                raise CorruptIndexError(
                    f"corrupt {self.KIND} {self._file}: last timestamp {last.timestamp} is "
                    f"below the first timestamp {first.timestamp}", file=self._file,
                    position=where, offset=last.offset)
            if last.offset < self.base_offset:
                raise CorruptIndexError(
                    f"corrupt {self.KIND} {self._file}: last offset {last.offset} is below "
                    f"the base offset {self.base_offset}", file=self._file, position=where,
                    offset=last.offset)
        if self.length % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"corrupt {self.KIND} {self._file}: size {self.length} bytes is not a "
                f"multiple of the {self.ENTRY_SIZE}-byte entry size", file=self._file,
                position=self.length)

    def entries_array(self) -> np.ndarray:
        """A copy of the entries as a TIME_ENTRY_DTYPE array (absolute offsets)."""
        raw = self._raw_entries(TIME_INDEX_FILE_DTYPE)
        out = np.empty(len(raw), dtype=TIME_ENTRY_DTYPE)
        out["timestamp"] = raw["timestamp"]
        out["offset"] = raw["relative_offset"].astype(np.int64) + self.base_offset
        return out
