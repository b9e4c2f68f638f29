"""One segment of a partition directory (Kafka's `LogSegment`).

A segment is four files named by its base offset zero-padded to 20 digits:

    <base>.log        concatenated record batches (FileRecords)
    <base>.index      offset index: (relative offset int32, position int32), 8 bytes an entry
    <base>.timeindex  time index: (timestamp int64, relative offset int32), 12 bytes an entry
    <base>.txnindex   aborted transactions, created on the first append only

Kafka's rules kept here (its LogSegment, OffsetIndex and TimeIndex):

- `append` adds an offset-index entry (largest offset of the chunk, position where the chunk
  starts) and a time-index `maybe_append` of the running max timestamp when more than
  `index.interval.bytes` were appended since the previous entry; the first chunk never gets
  one. Every offset must fit an int32 relative to the base offset.
- While a segment is active its indexes are preallocated to `max_index_size`; on roll
  (`on_become_inactive_segment`), close and recovery the final time-index entry (the max
  timestamp) is written into the reserved slot and both indexes are trimmed to their entries.
- `read` starts at the first batch whose last offset is >= the fetch offset: the offset index
  gives a position at or before it, then batch headers are scanned forward.
- `recover` rebuilds both indexes from the valid batches and truncates the log at the first
  invalid or partial batch; nothing before it is dropped.

Thread-safety: every method serializes on an internal lock, so a segment may be shared by
threads. Views returned by `read` point into a read-only mapping of the `.log`; they stay
valid across appends but must not be used after `truncate_to`, `recover`, `close` or
`delete` (the file may have shrunk under them).
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine._native.index import append_entry_pair as _append_entry_pair
from engine.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogSegmentOffsetOverflowError,
)
from engine.log._abstract_index import DEFAULT_MAX_INDEX_SIZE, INT32_MAX
from engine.log.index_rebuild import DEFAULT_INDEX_INTERVAL_BYTES, rebuild_indexes
from engine.log.offset_index import OffsetIndex
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import TransactionIndex
from engine.records import MemoryRecords
from engine.records.file_region import FileRegion

__all__ = [
    "FetchDataInfo",
    "LogSegment",
    "LogSegmentOffsetOverflowError",
    "TimestampAndOffset",
    "segment_file_name",
]

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
_NO_TIMESTAMP = -1
#: First bytes scanned when looking for a batch forward of an index entry (doubled as needed).
_SCAN_WINDOW = 64 * 1024
#: Bytes of a batch's offset (int64) and length (int32) fields: the log overhead.
_LOG_OVERHEAD = 12
_O_BINARY = getattr(os, "O_BINARY", 0)


@dataclass(frozen=True)
class FetchDataInfo:
    """What `LogSegment.read` returns.

    `fetch_offset` is the offset asked for, `position` the byte position in the segment where
    `records` starts; `records` is a zero-copy view of whole batches (possibly empty).
    """

    fetch_offset: int
    segment_base_offset: int
    position: int
    records: memoryview

    @property
    def size_in_bytes(self) -> int:
        return self.records.nbytes


@dataclass(frozen=True)
class TimestampAndOffset:
    """Kafka's FileRecords.TimestampAndOffset: the first record at or after a timestamp.
    `leader_epoch` is the batch's partition leader epoch, None when it has none (-1)."""

    timestamp: int
    offset: int
    leader_epoch: int | None


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`<base offset zero-padded to 20 digits><suffix>`, e.g. 00000000000000001234.log."""
    return f"{int(base_offset):020d}{suffix}"


class LogSegment:
    """One segment: its `.log`, offset index, time index and (lazy) transaction index.

    Use `LogSegment.open` for a segment that may already exist and `LogSegment.create` for a
    new active segment. Sizes are bytes, timestamps milliseconds.
    """

    def __init__(self, directory, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, file_suffix: str, new: bool):
        if base_offset < 0:
            raise ValueError(f"base offset must be >= 0, got {base_offset}")
        if index_interval_bytes < 0:
            raise ValueError(f"index interval bytes must be >= 0, got {index_interval_bytes}")
        self.dir = Path(directory)
        self.base_offset = int(base_offset)
        self.index_interval_bytes = int(index_interval_bytes)
        self.max_index_size = int(max_index_size)
        self._lock = threading.RLock()
        self._log_path = self._path(LOG_SUFFIX + file_suffix)
        flags = os.O_RDWR | os.O_CREAT | _O_BINARY | (os.O_EXCL if new else 0)
        self._fd = os.open(self._log_path, flags, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._map: mmap.mmap | None = None
        self._map_len = 0
        self._closed = False
        try:
            self.offset_index = OffsetIndex(self._path(INDEX_SUFFIX + file_suffix),
                                            self.base_offset, self.max_index_size)
            self.time_index = TimeIndex(self._path(TIME_INDEX_SUFFIX + file_suffix),
                                        self.base_offset, self.max_index_size)
        except BaseException:
            os.close(self._fd)
            raise
        self.txn_index = TransactionIndex(self.base_offset,
                                          self._path(TXN_INDEX_SUFFIX + file_suffix))
        self._bytes_since_last_index_entry = 0
        self._max_timestamp = _NO_TIMESTAMP
        self._shallow_offset_of_max_timestamp = self.base_offset
        self._next_offset: int | None = None
        # bytes [0, end) whose batches a consumer-facing read checked in this process (CRC,
        # offsets continuing from the base offset), and the last offset in them
        self._verified_prefix = (0, self.base_offset - 1)
        if self._size:
            self._load_largest_timestamp()

    # -- construction --------------------------------------------------------------------

    @classmethod
    def open(cls, directory, base_offset: int, *,
             index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
             max_index_size: int = DEFAULT_MAX_INDEX_SIZE, file_suffix: str = "",
             preallocate: bool = False) -> LogSegment:
        """Opens the segment's files, creating missing ones (indexes are then preallocated).

        Existing index files are taken as trimmed (Kafka's rule); call `resize_indexes` to
        make an opened segment active again. `preallocate` (Kafka's `preallocate` for the
        `.log`) is accepted for signature compatibility: the `.log` is never preallocated
        here, so nothing has to be trimmed on roll.
        """
        return cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                   max_index_size=max_index_size, file_suffix=file_suffix, new=False)

    @classmethod
    def create(cls, directory, base_offset: int, *,
               index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
               max_index_size: int = DEFAULT_MAX_INDEX_SIZE, file_suffix: str = "",
               preallocate: bool = False) -> LogSegment:
        """A new, empty active segment. Raises FileExistsError if its `.log` exists."""
        return cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                   max_index_size=max_index_size, file_suffix=file_suffix, new=True)

    def _path(self, suffix: str) -> Path:
        return self.dir / segment_file_name(self.base_offset, suffix)

    # -- properties ----------------------------------------------------------------------

    @property
    def log_file(self) -> Path:
        return self._log_path

    @property
    def size_in_bytes(self) -> int:
        """Bytes in the `.log`."""
        return self._size

    @property
    def max_timestamp_so_far(self) -> int:
        """The largest batch max timestamp appended (-1 for none)."""
        return self._max_timestamp

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        """Last offset of the batch that first reached `max_timestamp_so_far`."""
        return self._shallow_offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """The max timestamp seen, or the `.log` mtime in ms when there is none (Kafka's
        largestTimestamp, used by time-based retention)."""
        if self._max_timestamp >= 0:
            return self._max_timestamp
        return int(os.stat(self._log_path).st_mtime * 1000)

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} cannot be appended to segment {self._log_path}: offset - base "
                f"offset {self.base_offset} = {offset - self.base_offset}, allowed "
                f"[0, {INT32_MAX}]", file=self._log_path, position=self._size, offset=offset)

    # -- appending -----------------------------------------------------------------------

    def append(self, largest_offset: int, largest_timestamp: int,
               shallow_offset_of_max_timestamp: int, records, headers=None) -> None:
        """Appends whole batches (Kafka's LogSegment.append) at the end of the `.log`.

        Args:
            largest_offset: the last offset in `records`.
            largest_timestamp: the max timestamp in `records` (ms, -1 for none).
            shallow_offset_of_max_timestamp: last offset of the batch holding it.
            records: the bytes of one or more whole batches.
            headers: the caller's scan rows of `records` (BATCH_HEADER_DTYPE, positions
                relative to `records`), saving a second scan. Each v2 batch is written with
                the base offset and partition leader epoch of its row (the leader assigns
                them in the rows, see `engine._native.records.assign_offsets`); the input
                bytes are not modified. Without rows the bytes are written as they are.

        Raises:
            LogSegmentOffsetOverflowError: largest_offset does not fit relative to the base.
            InvalidRecordError: `records` does not end on a batch boundary.
            ValueError: `headers` do not tile `records`.
            IndexFullError / InvalidOffsetError: from the indexes (the log should have rolled,
                or offsets went backwards). Nothing is written to the `.log` then.
            OSError: the write failed; the `.log` is cut back to its previous size.
        """
        if type(records) is not bytes and type(records) is not bytearray:
            records = memoryview(records).cast("B")
        size = len(records)
        if not size:
            return
        with self._lock:
            if self._closed:
                self._require_open("append")
            if not 0 <= largest_offset - self.base_offset <= INT32_MAX:
                self._ensure_offset_in_range(largest_offset)
            if headers is None:
                headers = self._scan_whole_batches(records, size)
            position = self._size
            max_timestamp = self._max_timestamp
            shallow = self._shallow_offset_of_max_timestamp
            if largest_timestamp > max_timestamp:
                max_timestamp = largest_timestamp
                shallow = shallow_offset_of_max_timestamp
            indexed = self._bytes_since_last_index_entry > self.index_interval_bytes
            written = self._write_or_undo(records, headers, position, indexed, largest_offset,
                                          max_timestamp, shallow)
            self._max_timestamp = max_timestamp
            self._shallow_offset_of_max_timestamp = shallow
            self._size = position + written
            self._bytes_since_last_index_entry = \
                written if indexed else self._bytes_since_last_index_entry + written
            self._next_offset = largest_offset + 1  # the last offset of `records`

    def _scan_whole_batches(self, records, size: int):
        """The scan rows of `records` for an append given none; InvalidRecordError when the
        bytes do not end on a batch boundary (nothing is written then)."""
        headers, valid = _records.scan(records, False)
        if valid != size:
            raise InvalidRecordError(
                f"records appended to {self._log_path} end with a partial batch: "
                f"{size - valid} of {size} bytes", file=self._log_path,
                position=self._size + valid)
        return headers

    def _write_or_undo(self, records, headers, position: int, indexed: bool,
                       largest_offset: int, max_timestamp: int, shallow: int) -> int:
        """Adds the index entries (when `indexed`) and writes the batches at `position`;
        returns the bytes written. Called under the lock by `append`."""
        offset_entries = self.offset_index.entries
        time_entries = self.time_index.entries
        try:
            if indexed:
                self._append_index_entries(largest_offset, position, max_timestamp, shallow)
            return _records.write_batches(self._fd, records, headers, position)
        except BaseException as exc:
            # Nothing of a failed append may stay: its index entries would point past the
            # end, and bytes that reached the file would not end on a batch boundary.
            self.offset_index._truncate_to_entries(offset_entries)
            self.time_index._truncate_to_entries(time_entries)
            if isinstance(exc, OSError):
                os.ftruncate(self._fd, position)
            raise

    def _append_index_entries(self, offset: int, position: int, timestamp: int,
                              timestamp_offset: int) -> None:
        """OffsetIndex.append and TimeIndex.maybe_append through their native cores: every
        index mutation runs under this segment's lock, so the indexes' own locks are not
        needed here. A refusal is raised by the public method with its full message."""
        refused = _append_entry_pair(self.offset_index, self.time_index, offset, position,
                                     timestamp, timestamp_offset)
        if refused == 1:
            self.offset_index.append(offset, position)
        elif refused == 2:
            self.time_index.maybe_append(timestamp, timestamp_offset)

    def resize_indexes(self, size: int | None = None) -> None:
        """Resizes both indexes' files (default: `max_index_size`, for an active segment)."""
        with self._lock:
            size = self.max_index_size if size is None else size
            self.offset_index.resize(size)
            self.time_index.resize(size)

    def flush(self) -> None:
        """fsyncs the `.log` and msyncs the indexes (and the transaction index)."""
        with self._lock:
            self._require_open("flush")
            os.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()

    # -- reading -------------------------------------------------------------------------

    def _view(self) -> memoryview:
        """A read-only view of the whole `.log` (remapped when it grew)."""
        size = self._size
        if size == 0:
            return memoryview(b"")
        if self._map is None or self._map_len < size:
            self._map = mmap.mmap(self._fd, size, access=mmap.ACCESS_READ)
            self._map_len = size
        return memoryview(self._map)[:size]

    def _headers_from(self, view: memoryview, start: int, window: int) -> np.ndarray:
        """Headers of the whole batches in [start, start + window), at least one if any
        batch starts at `start` and ends within the view; positions absolute."""
        end = view.nbytes
        while True:
            stop = min(end, start + window)
            headers, _ = _records.scan(view[start:stop], False)
            if len(headers) or stop == end:
                headers = headers.copy()
                headers["position"] += start
                return headers
            window *= 2

    def translate_offset(self, offset: int, starting_position: int = 0) -> np.void | None:
        """The header row of the first batch with last offset >= `offset` (Kafka's
        translateOffset / searchForOffsetWithSize), or None if there is none."""
        view = self._view()
        position = max(self.offset_index.lookup(offset).position, starting_position)
        while position < view.nbytes:
            headers = self._headers_from(view, position, _SCAN_WINDOW)
            if not len(headers):
                return None
            hit = np.flatnonzero(headers["last_offset"] >= offset)
            if len(hit):
                return headers[hit[0]]
            position = int(headers["position"][-1] + headers["size"][-1])
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo | None:
        """Whole batches from the one holding `start_offset`, up to `max_size` bytes and not
        past `max_position` (default: the end of the segment).

        With `min_one_message`, the first batch is returned whole even if larger than
        `max_size`. Returns None when no batch has a last offset >= start_offset (past the
        end of the segment). The records are a zero-copy view (see the module notes).
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for read of segment {self._log_path}")
        with self._lock:
            self._require_open("read")
            first = self.translate_offset(start_offset)
            if first is None:
                return None
            view = self._view()
            position = int(first["position"])
            max_position = self._size if max_position is None else min(max_position, self._size)
            adjusted = max(max_size, int(first["size"])) if min_one_message else max_size
            fetch_size = max(0, min(max_position - position, adjusted))
            _, valid = _records.scan(view[position:position + fetch_size], False)
            return FetchDataInfo(start_offset, self.base_offset, position,
                                 view[position:position + valid])

    def next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty)."""
        known = self._next_offset  # one attribute read: no lock needed on the append path
        if known is not None:
            return known
        with self._lock:
            if self._next_offset is None:
                view = self._view()
                position = self.offset_index.lookup(self.offset_index.last_offset).position
                last = self.base_offset - 1
                while position < view.nbytes:
                    headers = self._headers_from(view, position, 1 << 20)
                    if not len(headers):
                        break
                    last = int(headers["last_offset"][-1])
                    position = int(headers["position"][-1] + headers["size"][-1])
                self._next_offset = last + 1
            return self._next_offset

    def find_offset_by_timestamp(self, timestamp: int,
                                 starting_offset: int = 0) -> TimestampAndOffset | None:
        """The first record with timestamp >= `timestamp` and offset >= `starting_offset`
        (Kafka's LogSegment.findOffsetByTimestamp), or None."""
        with self._lock:
            self._require_open("find_offset_by_timestamp")
            entry = self.time_index.lookup(timestamp)
            position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
            view = self._view()
            headers, _ = _records.scan(view[position:], False)
            for row in headers[headers["max_timestamp"] >= timestamp]:
                start = position + int(row["position"])
                batch = next(iter(MemoryRecords(view[start:start + int(row["size"])],
                                                file=self._log_path).batches()))
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(record.timestamp, record.offset,
                                                  None if epoch == -1 else epoch)
            return None

    # -- truncation, recovery --------------------------------------------------------------

    @property
    def verified_prefix(self) -> tuple[int, int]:
        """(end, last offset) of the bytes [0, end) checked by a consumer-facing read in
        this process (see engine.rlm.reader.read_local): reads inside it need no check."""
        return self._verified_prefix

    def extend_verified_prefix(self, from_end: int, to_end: int, last_offset: int) -> None:
        """Records bytes [from_end, to_end) as checked after [0, from_end) (ignored when
        another read moved the prefix meanwhile, or a truncation cut it)."""
        with self._lock:
            if self._verified_prefix[0] == from_end and to_end <= self._size:
                self._verified_prefix = (to_end, last_offset)

    def _truncate_log(self, size: int) -> int:
        removed = self._size - size
        if self._verified_prefix[0] > size:  # offsets written again must be checked again
            self._verified_prefix = (0, self.base_offset - 1)
        if removed > 0:
            self._release_map()
            os.ftruncate(self._fd, size)
            self._size = size
        return max(removed, 0)

    def _release_map(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # views handed out by read() keep it alive; dropped with them
            self._map = None
            self._map_len = 0

    def truncate_to(self, offset: int) -> int:
        """Drops every batch whose last offset is >= `offset` and the index entries at or
        above it; the indexes are preallocated again (the segment becomes active). Returns
        the bytes removed from the `.log`."""
        with self._lock:
            self._require_open("truncate_to")
            mapping = self.translate_offset(offset)
            self.offset_index.truncate_to(offset)
            self.time_index.truncate_to(offset)
            self.txn_index.truncate_to(offset)
            self.resize_indexes()
            removed = 0 if mapping is None else self._truncate_log(int(mapping["position"]))
            self._bytes_since_last_index_entry = 0
            self._next_offset = None
            self._max_timestamp = _NO_TIMESTAMP
            self._shallow_offset_of_max_timestamp = self.base_offset
            if self._size:
                self._load_largest_timestamp()
            return removed

    def _load_largest_timestamp(self) -> None:
        """Max timestamp from the time index's last entry and the batches after it (Kafka's
        loadLargestTimestamp)."""
        last = self.time_index.last_entry
        self._max_timestamp, self._shallow_offset_of_max_timestamp = last.timestamp, last.offset
        position = self.offset_index.lookup(last.offset).position
        headers = _scan_lenient(self._view()[position:])
        if len(headers):
            i = int(np.argmax(headers["max_timestamp"]))
            if headers["max_timestamp"][i] > self._max_timestamp:
                self._max_timestamp = int(headers["max_timestamp"][i])
                self._shallow_offset_of_max_timestamp = int(headers["last_offset"][i])

    def _valid_prefix(self, view: memoryview) -> tuple[np.ndarray, str]:
        """Headers of the batches before the first invalid or partial one, and why the scan
        stopped there ('' when the whole log is valid)."""
        try:
            headers, valid = _records.scan(view, True)
            reason = "a partial batch" if valid < view.nbytes else ""
        except (CorruptRecordError, InvalidRecordError) as exc:
            bad = int(exc.position or 0)
            headers, _ = _records.scan(view[:bad], True)
            reason = f"an invalid batch ({exc})"
        invalid = np.flatnonzero(~headers["crc_valid"])
        if len(invalid):
            headers = headers[: invalid[0]]
            reason = "a batch with a bad CRC"
        overflow = np.flatnonzero((headers["last_offset"] - self.base_offset > INT32_MAX)
                                  | (headers["base_offset"] < self.base_offset))
        if len(overflow):
            headers = headers[: overflow[0]]
            reason = "a batch whose offsets do not fit the segment"
        return headers, reason

    def verify_batches(self, end_offset: int) -> int:
        """Checks the whole `.log` as a consumer checks what it fetches, before the segment
        leaves the broker (the RLM's copier runs it before tiering): whole entries only
        (framing, no partial tail), every CRC, the first batch at the base offset, each
        v2 batch continuing the previous one (base offset = previous last offset + 1;
        legacy entries: increasing) and nothing at or above `end_offset` (the next
        segment's base offset). A base offset is outside the batch CRC: the continuity
        check is what catches a damaged one. One native scan at memory speed, under the
        segment's lock (a truncation cannot shrink the file under it). Returns the
        entries checked.

        Raises:
            CorruptRecordError: the first bad entry, with the file, its byte position and
                the offset expected there.
        """
        with self._lock:
            self._require_open("verify_batches")
            view = self._view()
            try:
                headers, valid = _records.scan(view, True)
                framing = None if valid == view.nbytes else (
                    valid, f"a partial entry of {view.nbytes - valid} bytes at the end")
            except (CorruptRecordError, InvalidRecordError) as exc:
                bad = int(exc.position or 0)
                headers, _ = _records.scan(view[:bad], True)
                framing = (bad, f"impossible framing ({exc})")
        path = self._log_path

        def fail(i: int, position: int, why: str) -> CorruptRecordError:
            expected = self.base_offset if i == 0 else int(headers["last_offset"][i - 1]) + 1
            return CorruptRecordError(
                f"segment {path}: entry at byte {position} (offset {expected} expected "
                f"there): {why}", file=str(path), position=position, offset=expected)

        n = len(headers)
        if n:
            first_bad = self._first_bad_entry(headers, end_offset)
            if first_bad < n:
                row = headers[first_bad]
                position = int(row["position"])
                if not row["crc_valid"]:
                    raise fail(first_bad, position,
                               f"bad CRC (stored {int(row['crc']):#010x})")
                raise fail(first_bad, position,
                           f"offsets [{int(row['base_offset'])}, {int(row['last_offset'])}] "
                           f"do not continue the previous entry within [{self.base_offset}, "
                           f"{end_offset})")
        if framing is not None:
            raise fail(n, framing[0], framing[1])
        return n

    def _first_bad_entry(self, headers, end_offset: int) -> int:
        """The row of the first entry of `verify_batches`' scan (non-empty) with a bad CRC or
        offsets that do not continue the previous entry within [base offset, `end_offset`);
        len(headers) when there is none. Vectorised over the rows."""
        n = len(headers)
        crc_bad = np.flatnonzero(~headers["crc_valid"])
        base, last = headers["base_offset"], headers["last_offset"]
        v2 = headers["magic"] >= 2
        step = np.empty(n, dtype=bool)
        step[0] = base[0] == self.base_offset
        if n > 1:
            step[1:] = np.where(v2[1:] & v2[:-1], base[1:] == last[:-1] + 1,
                                base[1:] > last[:-1])
        step &= (last >= base) & (last < end_offset)
        jump = np.flatnonzero(~step)
        return min(int(crc_bad[0]) if len(crc_bad) else n, int(jump[0]) if len(jump) else n)

    def recover(self, producer_state=None) -> int:
        """Rebuilds the indexes from the `.log` and truncates it at the first invalid or
        partial batch (Kafka's LogSegment.recover). Returns the bytes truncated.

        `producer_state`, if given, has its `update(headers)` called with the header rows
        (BATCH_HEADER_DTYPE) of the valid batches, in order. The indexes end trimmed, with
        the final time-index entry written; call `resize_indexes` to append again.
        """
        with self._lock:
            self._require_open("recover")
            headers, reason = self._valid_prefix(self._view())
            valid = int(headers["position"][-1] + headers["size"][-1]) if len(headers) else 0
            offsets, times = rebuild_indexes(headers, self.base_offset,
                                             self.index_interval_bytes, self.max_index_size)
            self.offset_index.reset()
            self.time_index.reset()
            self.txn_index.reset()
            self.offset_index.append_entries(offsets["offset"], offsets["position"])
            self.time_index.maybe_append_entries(times["timestamp"], times["offset"],
                                                 skip_full_check=True)
            self._bytes_since_last_index_entry = _bytes_after_last_entry(headers, offsets)
            self._set_max_from(headers)
            if producer_state is not None:
                producer_state.update(headers)
            self._next_offset = (int(headers["last_offset"][-1]) + 1 if len(headers)
                                 else self.base_offset)
            truncated = self._truncate_log(valid)
            if truncated:
                log.warning("Found %s in log segment %s at byte position %d (offset %d); "
                            "truncated %d bytes", reason or "invalid data", self._log_path,
                            valid, self._next_offset, truncated)
            self.offset_index.trim_to_valid_size()
            self._append_final_time_entry()
            self.time_index.trim_to_valid_size()
            return truncated

    def _set_max_from(self, headers: np.ndarray) -> None:
        self._max_timestamp = _NO_TIMESTAMP
        self._shallow_offset_of_max_timestamp = self.base_offset
        if len(headers):
            i = int(np.argmax(headers["max_timestamp"]))
            if headers["max_timestamp"][i] > _NO_TIMESTAMP:
                self._max_timestamp = int(headers["max_timestamp"][i])
                self._shallow_offset_of_max_timestamp = int(headers["last_offset"][i])

    def _append_final_time_entry(self) -> None:
        self.time_index.maybe_append(self._max_timestamp, self._shallow_offset_of_max_timestamp,
                                     skip_full_check=True)

    # -- lifecycle -------------------------------------------------------------------------

    def on_become_inactive_segment(self) -> None:
        """On roll: the final time-index entry (max timestamp) and trimmed indexes."""
        with self._lock:
            self._require_open("on_become_inactive_segment")
            self._append_final_time_entry()
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    def close(self) -> None:
        """Writes the final time-index entry, trims the indexes and closes every file.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            if self._max_timestamp != _NO_TIMESTAMP:
                self._append_final_time_entry()
            self.offset_index.close()
            self.time_index.close()
            self.txn_index.close()
            self._release_map()
            os.close(self._fd)
            self._closed = True

    def delete(self) -> None:
        """Closes (without trimming) and deletes every file of the segment."""
        with self._lock:
            if not self._closed:
                self.offset_index.close_handler()
                self.time_index.close_handler()
                self.txn_index.close()
                self._release_map()
                os.close(self._fd)
                self._closed = True
            self.offset_index.delete_if_exists()
            self.time_index.delete_if_exists()
            self.txn_index.delete_if_exists()
            try:
                os.unlink(self._log_path)
            except FileNotFoundError:
                pass

    def file_region(self, position: int, view: memoryview) -> FileRegion | None:
        """`view` (bytes of this segment from `position`, as a read returned them) as a
        FileRegion with a descriptor of its own, for sendfile; None once the segment is
        closed or when the bytes are not all in the file."""
        with self._lock:
            if self._closed or position < 0 or position + view.nbytes > self._size:
                return None
            return FileRegion(os.dup(self._fd), position, view)

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"{what} on closed segment {self._log_path}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"LogSegment(file={str(self._log_path)!r}, base_offset={self.base_offset}, "
                f"size={self._size})")


def _scan_lenient(view: memoryview) -> np.ndarray:
    """Headers of the batches before the first one the scan rejects (opening a segment that
    still needs recovery must not fail)."""
    try:
        return _records.scan(view, False)[0]
    except (CorruptRecordError, InvalidRecordError) as exc:
        return _records.scan(view[: int(exc.position or 0)], False)[0]


def _bytes_after_last_entry(headers: np.ndarray, offsets: np.ndarray) -> int:
    """Bytes appended since the last offset-index entry after a rebuild (so that later
    appends continue Kafka's rule where the rebuild stopped)."""
    if not len(headers):
        return 0
    start = int(offsets["position"][-1]) if len(offsets) else 0
    return int(headers["position"][-1] + headers["size"][-1]) - start

