"""The local log of one partition directory (the local part of Kafka's `UnifiedLog`).

A partition directory holds segments (see `engine.log.segment`), `leader-epoch-checkpoint`
and, when the topic id is known, `partition.metadata`. `UnifiedLog` loads them, recovers
what may be damaged, appends as leader (assigning offsets, stamping the leader epoch) or as
follower (keeping the offsets), rolls segments with Kafka's rules, reads across segments and
deletes whole segments through one hook (`delete_segments`) that retention will use.

Kafka's rules kept here (kafka-reference.md §2):

- Loading: `.deleted`, `.cleaned` and temporary checkpoint files are removed; a `.log.swap`
  replaces the segments its offsets cover and its indexes are rebuilt; index files without a
  `.log` are removed.
- Recovery: every segment from the one holding the recovery point on is scanned with CRCs
  (`LogSegment.recover`) unless the shutdown was clean; segments whose indexes are missing or
  fail their sanity check are recovered in any case. The first segment truncated by its
  recovery ends the log: the later segments are deleted, and what was dropped is logged at
  WARNING. Nothing before the first invalid batch is dropped.
- Rolling before an append when the active segment's size > segment.bytes - incoming size,
  an index is full, the largest incoming offset does not fit relative to the base offset,
  or the incoming max timestamp is more than segment.ms past the segment's first batch's
  max timestamp (its creation time when it has no timestamp). No jitter.
- The epoch cache is assigned (epoch, first offset of the batch) for each v2 batch whose
  partition leader epoch is above the latest one, and checkpointed at once.

Not done here: producer state (snapshots at roll), the transaction index on appends,
LOG_APPEND_TIME rewriting on leader appends (batches keep their timestamps), high watermark,
and asynchronous `.deleted` renames (segments are deleted at once).

Thread-safety: every public method serializes on one lock. Views returned by `read` follow
`LogSegment.read`'s rules (invalid after truncation or deletion of their segment).
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    OffsetOutOfRangeError,
)
from engine.log.checkpoint import LeaderEpochCheckpointFile, PartitionMetadataFile, Uuid
from engine.log.leader_epoch import LeaderEpochFileCache
from engine.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)

__all__ = ["LEADER_EPOCH_CHECKPOINT_FILE", "PARTITION_METADATA_FILE", "UnifiedLog"]

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
_NO_TIMESTAMP = -1
_MIN_MAGIC = 2
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_POSITION = 12


def _now_ms() -> int:
    return int(time.time() * 1000)


class _EpochAssigner:
    """Feeds recovered batch headers to the epoch cache (Kafka's recovery rule)."""

    def __init__(self, cache: LeaderEpochFileCache):
        self.cache = cache

    def update(self, headers: np.ndarray) -> None:
        _assign_epochs(self.cache, headers)


def _assign_epochs(cache: LeaderEpochFileCache, headers: np.ndarray) -> None:
    for row in headers:
        epoch = int(row["partition_leader_epoch"])
        latest = cache.latest_epoch
        if row["magic"] >= 2 and epoch >= 0 and (latest is None or epoch > latest):
            cache.assign(epoch, int(row["base_offset"]))


class UnifiedLog:
    """One partition directory's local log. Use `UnifiedLog.open`."""

    def __init__(self, directory, *, segment_bytes: int, segment_ms: int,
                 index_interval_bytes: int, segment_index_bytes: int, recovery_point: int,
                 clock: Callable[[], int]):
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {segment_bytes}")
        if segment_ms < 1:
            raise ValueError(f"segment_ms must be >= 1, got {segment_ms}")
        if segment_index_bytes < 4:
            raise ValueError(f"segment_index_bytes must be >= 4, got {segment_index_bytes}")
        self.dir = Path(directory)
        self.segment_bytes = int(segment_bytes)
        self.segment_ms = int(segment_ms)
        self.index_interval_bytes = int(index_interval_bytes)
        self.segment_index_bytes = int(segment_index_bytes)
        self.recovery_point = max(0, int(recovery_point))
        self._clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        #: base offset -> the segment's rolling timestamp (first batch's max timestamp, or
        #: its creation time when it has none), filled lazily.
        self._rolling_ts: dict[int, int] = {}
        self._created_ms: dict[int, int] = {}
        self._log_start_offset = 0
        self._closed = False
        self.leader_epoch_cache: LeaderEpochFileCache | None = None
        self.partition_metadata = PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE)

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory, *, segment_bytes: int = 1073741824,
             segment_ms: int = 604800000, index_interval_bytes: int = 4096,
             segment_index_bytes: int = 10485760, recovery_point: int = 0,
             clean_shutdown: bool = False, topic_id: Uuid | str | None = None,
             log_start_offset: int | None = None,
             clock: Callable[[], int] | None = None) -> UnifiedLog:
        """Loads (or creates) the partition directory and recovers it (see the module notes).

        Args are Kafka's topic configs under Python names (segment.bytes, segment.ms,
        index.interval.bytes, segment.index.bytes) with Kafka's defaults; `recovery_point`
        is the first offset not known to be flushed; `clean_shutdown` skips the scan when
        every index passes its sanity check; `topic_id` (a Uuid or its string) is written to
        `partition.metadata`; `log_start_offset` (checkpointed by the caller) is raised to
        the first segment's base offset; `clock` gives now in ms (segment creation times).

        Raises:
            ValueError: a config out of range, or a topic id different from the one in
                `partition.metadata`.
            CorruptCheckpointError: an unreadable `leader-epoch-checkpoint`.
        """
        self = cls(directory, segment_bytes=segment_bytes, segment_ms=segment_ms,
                   index_interval_bytes=index_interval_bytes,
                   segment_index_bytes=segment_index_bytes, recovery_point=recovery_point,
                   clock=clock or _now_ms)
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._load(clean_shutdown, log_start_offset, topic_id)
        except BaseException:
            self._close_segments()
            raise
        return self

    def _load(self, clean_shutdown: bool, log_start_offset: int | None, topic_id) -> None:
        if topic_id is not None:
            self._write_topic_id(topic_id)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT_FILE))
        self._remove_temporary_files()
        self._complete_swaps()
        bases = self._segment_bases()
        missing_index = {b for b in bases
                         if not all((self.dir / segment_file_name(b, s)).exists()
                                    for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX))}
        for base in bases:
            self._add_segment(self._open_segment(base))
        if not self._segments:
            start = 0 if log_start_offset is None else int(log_start_offset)
            self._add_segment(self._create_segment(start))
        self._recover(clean_shutdown, missing_index)
        self.active_segment.resize_indexes()
        first = self._segments[0].base_offset
        self._log_start_offset = max(first, int(log_start_offset or 0))
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.leader_epoch_cache.flush()  # an empty cache still gets "0\n0\n", as Kafka's

    def _write_topic_id(self, topic_id) -> None:
        if not isinstance(topic_id, Uuid):
            topic_id = Uuid.from_string(str(topic_id))
        if self.partition_metadata.exists():
            existing = self.partition_metadata.read().topic_id
            if existing != topic_id:
                raise ValueError(f"topic id {topic_id} differs from {existing} recorded in "
                                 f"{self.partition_metadata.file}")
            return
        self.partition_metadata.write(topic_id)

    def _remove_temporary_files(self) -> None:
        for path in sorted(self.dir.iterdir()):
            name = path.name
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                log.info("Deleting leftover file %s", path)
                path.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                log.info("Deleting leftover index swap file %s (rebuilt from the log)", path)
                path.unlink(missing_ok=True)

    def _complete_swaps(self) -> None:
        """A `.log.swap` replaces the segments whose base offsets it covers (Kafka's
        completion of an interrupted compaction or split); its indexes are rebuilt."""
        for path in sorted(self.dir.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
            base = int(path.name[:20])
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                headers = np.empty(0, dtype=_records.BATCH_HEADER_DTYPE)
                if size:
                    with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
                        view = memoryview(m)
                        try:
                            headers = _records.scan(view, False)[0].copy()
                        finally:
                            view.release()
            next_offset = int(headers["last_offset"][-1]) + 1 if len(headers) else base
            for other in self._segment_bases():
                if base <= other < next_offset or other == base:
                    self._delete_segment_files(other)
            for suffix in _INDEX_SUFFIXES:
                (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
            os.replace(path, self.dir / segment_file_name(base, LOG_SUFFIX))
            log.info("Completed swap of %s: segments in [%d, %d) replaced", path, base,
                     next_offset)

    def _segment_bases(self) -> list[int]:
        bases, orphans = set(), []
        for path in self.dir.iterdir():
            m = _SEGMENT_FILE.match(path.name)
            if m is None:
                continue
            if m.group(2) == LOG_SUFFIX:
                bases.add(int(m.group(1)))
            else:
                orphans.append(path)
        for path in orphans:
            if int(path.name[:20]) not in bases:
                log.info("Deleting index file %s without a log file", path)
                path.unlink(missing_ok=True)
        return sorted(bases)

    def _delete_segment_files(self, base: int) -> None:
        for suffix in (LOG_SUFFIX, *_INDEX_SUFFIXES):
            (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)

    def _open_segment(self, base: int) -> LogSegment:
        self._created_ms[base] = self._clock()
        return LogSegment.open(self.dir, base, index_interval_bytes=self.index_interval_bytes,
                               max_index_size=self.segment_index_bytes)

    def _create_segment(self, base: int) -> LogSegment:
        # Stale index files of a segment never written are replaced (Kafka does the same).
        for suffix in _INDEX_SUFFIXES:
            (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
        self._created_ms[base] = self._clock()
        return LogSegment.create(self.dir, base, index_interval_bytes=self.index_interval_bytes,
                                 max_index_size=self.segment_index_bytes)

    def _add_segment(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        self._bases.insert(i, segment.base_offset)
        self._segments.insert(i, segment)

    def _remove_segment(self, segment: LogSegment) -> None:
        i = self._segments.index(segment)
        del self._segments[i]
        del self._bases[i]
        self._rolling_ts.pop(segment.base_offset, None)
        self._created_ms.pop(segment.base_offset, None)

    @staticmethod
    def _indexes_sane(segment: LogSegment) -> bool:
        try:
            segment.offset_index.sanity_check()
            segment.time_index.sanity_check()
            if segment.txn_index.file is not None and Path(segment.txn_index.file).exists():
                segment.txn_index.sanity_check()
        except CorruptIndexError as exc:
            log.warning("Found a corrupt index of %s, rebuilding it: %s", segment, exc)
            return False
        return True

    def _recover(self, clean_shutdown: bool, missing_index: set[int]) -> None:
        # The segment holding the recovery point and every later one, unless clean.
        holder = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        assigner = _EpochAssigner(self.leader_epoch_cache)
        for i, segment in enumerate(list(self._segments)):
            needs = segment.base_offset in missing_index or not self._indexes_sane(segment)
            if not clean_shutdown and i >= holder:
                needs = True
            if not needs:
                continue
            truncated = segment.recover(assigner)
            if truncated:
                self._drop_after(segment, truncated)
                break

    def _drop_after(self, segment: LogSegment, truncated: int) -> None:
        """Deletes every segment after `segment` (recovery truncated it), logging what."""
        later = self._segments[self._segments.index(segment) + 1:]
        dropped = [f"{s.log_file.name} (offsets [{s.base_offset}, {s.next_offset() - 1}], "
                   f"{s.size_in_bytes} bytes)" for s in later]
        log.warning("Recovery of %s truncated %d bytes at offset %d; deleting %d later "
                    "segment(s) after the corruption point: %s", segment.log_file, truncated,
                    segment.next_offset(), len(later), ", ".join(dropped) or "none")
        for s in later:
            self._remove_segment(s)
            s.delete()

    # -- properties ------------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            return self.active_segment.next_offset()

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size_in_bytes for s in self._segments)

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"{what} on closed log {self.dir}")

    # -- appending -------------------------------------------------------------------------

    def _validate(self, records) -> tuple[bytearray, np.ndarray]:
        data = bytearray(records)
        if not data:
            raise InvalidRecordError(f"empty append to log {self.dir}")
        headers, valid = _records.scan(data, True)
        if valid != len(data):
            raise InvalidRecordError(
                f"records appended to log {self.dir} end with a partial batch: "
                f"{len(data) - valid} of {len(data)} bytes", position=valid)
        old = np.flatnonzero(headers["magic"] < _MIN_MAGIC)
        if len(old):
            row = headers[old[0]]
            raise InvalidRecordError(
                f"batch at byte {int(row['position'])} of an append to log {self.dir} has "
                f"magic v{int(row['magic'])}: only v2 record batches can be appended",
                position=int(row["position"]), offset=int(row["base_offset"]))
        bad = np.flatnonzero(~headers["crc_valid"])
        if len(bad):
            row = headers[bad[0]]
            raise CorruptRecordError(
                f"batch at byte {int(row['position'])} of an append to log {self.dir} has a "
                f"bad CRC (stored {int(row['crc']):#010x})", position=int(row["position"]),
                offset=int(row["base_offset"]))
        return data, headers.copy()

    def append_as_leader(self, records, leader_epoch: int) -> tuple[int, int]:
        """Validates v2 batches, assigns offsets from the log end, stamps `leader_epoch`,
        and appends them. Returns (first offset, last offset).

        Raises:
            InvalidRecordError: empty, partial, or magic < 2 input.
            CorruptRecordError: a batch whose CRC does not match.
            ValueError: a negative leader epoch.
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
        data, headers = self._validate(records)
        with self._lock:
            self._require_open("append_as_leader")
            next_offset = self.log_end_offset
            for row in headers:
                pos = int(row["position"])
                delta = int(row["last_offset"]) - int(row["base_offset"])
                _BASE_OFFSET.pack_into(data, pos, next_offset)
                _LEADER_EPOCH.pack_into(data, pos + _LEADER_EPOCH_POSITION, leader_epoch)
                row["base_offset"] = next_offset
                row["last_offset"] = next_offset + delta
                row["partition_leader_epoch"] = leader_epoch
                next_offset += delta + 1
            self._append(data, headers)
            return int(headers["base_offset"][0]), int(headers["last_offset"][-1])

    def append_as_follower(self, records) -> tuple[int, int]:
        """Appends replicated v2 batches with their own offsets and leader epochs. Returns
        (first offset, last offset).

        Raises:
            InvalidOffsetError: the first offset is below the log end offset, or offsets do
                not increase from batch to batch.
            InvalidRecordError / CorruptRecordError: as for `append_as_leader`.
        """
        data, headers = self._validate(records)
        with self._lock:
            self._require_open("append_as_follower")
            end = self.log_end_offset
            first = int(headers["base_offset"][0])
            if first < end:
                raise InvalidOffsetError(
                    f"follower append to log {self.dir} starts at offset {first}, below the "
                    f"log end offset {end}", offset=first)
            if len(headers) > 1 and np.any(headers["base_offset"][1:]
                                           <= headers["last_offset"][:-1]):
                i = int(np.flatnonzero(headers["base_offset"][1:]
                                       <= headers["last_offset"][:-1])[0]) + 1
                raise InvalidOffsetError(
                    f"follower append to log {self.dir}: batch at byte "
                    f"{int(headers['position'][i])} starts at offset "
                    f"{int(headers['base_offset'][i])}, not above the previous batch's last "
                    f"offset {int(headers['last_offset'][i - 1])}",
                    position=int(headers["position"][i]),
                    offset=int(headers["base_offset"][i]))
            self._append(data, headers)
            return first, int(headers["last_offset"][-1])

    def _append(self, data: bytearray, headers: np.ndarray) -> None:
        largest = int(headers["last_offset"][-1])
        i = int(np.argmax(headers["max_timestamp"]))
        max_ts = int(headers["max_timestamp"][i])
        shallow = int(headers["last_offset"][i])
        segment = self._maybe_roll(len(data), max_ts, int(headers["base_offset"][0]), largest)
        _assign_epochs(self.leader_epoch_cache, headers)
        was_empty = segment.size_in_bytes == 0
        segment.append(largest, max_ts, shallow, data)
        if was_empty:
            self._rolling_ts[segment.base_offset] = int(headers["max_timestamp"][0])

    def _rolling_timestamp(self, segment: LogSegment) -> int:
        ts = self._rolling_ts.get(segment.base_offset)
        if ts is None:
            first = segment.translate_offset(segment.base_offset)
            ts = _NO_TIMESTAMP if first is None else int(first["max_timestamp"])
            self._rolling_ts[segment.base_offset] = ts
        return ts

    def _should_roll(self, segment: LogSegment, size: int, max_ts: int,
                     largest: int) -> str | None:
        if segment.size_in_bytes > self.segment_bytes - size:
            return (f"size {segment.size_in_bytes} + {size} incoming bytes exceeds "
                    f"segment.bytes {self.segment_bytes}")
        if segment.offset_index.is_full():
            return "offset index full"
        if segment.time_index.is_full():
            return "time index full"
        if not segment.can_convert_to_relative_offset(largest):
            return f"offset {largest} does not fit relative to base {segment.base_offset}"
        if segment.size_in_bytes > 0:
            rolling = self._rolling_timestamp(segment)
            if rolling >= 0:
                waited = max_ts - rolling
            else:
                waited = self._clock() - self._created_ms.get(segment.base_offset,
                                                              self._clock())
            if waited > self.segment_ms:
                return f"{waited} ms since the segment's first batch exceeds segment.ms"
        return None

    def _maybe_roll(self, size: int, max_ts: int, first: int, largest: int) -> LogSegment:
        segment = self.active_segment
        reason = self._should_roll(segment, size, max_ts, largest)
        if reason is None:
            return segment
        log.info("Rolling log %s at offset %d: %s", self.dir, max(first, self.log_end_offset),
                 reason)
        return self._roll(max(first, self.log_end_offset))

    def roll(self) -> LogSegment:
        """Starts a new active segment at the log end offset (no-op when the active segment
        is empty). Returns the active segment."""
        with self._lock:
            self._require_open("roll")
            return self._roll(self.log_end_offset)

    def _roll(self, new_base: int) -> LogSegment:
        active = self.active_segment
        if active.size_in_bytes == 0:
            if active.base_offset == new_base:
                return active
            self._remove_segment(active)
            active.delete()
        else:
            active.on_become_inactive_segment()
        segment = self._create_segment(new_base)
        self._add_segment(segment)
        return segment

    # -- reading ---------------------------------------------------------------------------

    def _out_of_range(self, offset: int, what: str) -> OffsetOutOfRangeError:
        start, end = self._log_start_offset, self.log_end_offset
        return OffsetOutOfRangeError(
            f"{what} offset {offset} of log {self.dir} is out of range: valid offsets are "
            f"[{start}, {end}] (log start offset, log end offset)", offset=offset,
            log_start_offset=start, log_end_offset=end)

    def read(self, offset: int, max_bytes: int,
             min_one_message: bool = True) -> tuple[memoryview, int]:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first batch
        whole even if larger when `min_one_message`), from one segment as Kafka does.

        Returns (zero-copy view, next fetch offset hint): the offset after the last batch
        returned, or `offset` when nothing is (at the log end, or `max_bytes` too small).

        Raises:
            OffsetOutOfRangeError: `offset` outside [log_start_offset, log_end_offset].
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self._require_open("read")
            end = self.log_end_offset
            if offset < self._log_start_offset or offset > end:
                raise self._out_of_range(offset, "fetch")
            if offset == end:
                return memoryview(b""), offset
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            for segment in self._segments[i:]:
                info = segment.read(offset, max_bytes, min_one_message=min_one_message)
                if info is not None:
                    view = info.records
                    if not view.nbytes:
                        return view, offset
                    headers, _ = _records.scan(view, False)
                    return view, int(headers["last_offset"][-1]) + 1
            return memoryview(b""), offset

    # -- flushing, closing -----------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsyncs the segments holding offsets in [recovery point, up_to) (default: the log
        end) and moves the recovery point to `up_to`."""
        with self._lock:
            self._require_open("flush")
            end = self.log_end_offset
            up_to = end if up_to is None else min(int(up_to), end)
            if up_to <= self.recovery_point:
                return
            for j, segment in enumerate(self._segments):
                next_base = self._bases[j + 1] if j + 1 < len(self._bases) else None
                if segment.base_offset < up_to and (next_base is None
                                                    or next_base > self.recovery_point):
                    segment.flush()
            self.recovery_point = up_to

    def close(self) -> None:
        """Flushes, then closes every segment (final time-index entry, trimmed indexes).
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
            finally:
                self._close_segments()
                self._closed = True

    def _close_segments(self) -> None:
        for segment in self._segments:
            segment.close()

    # -- truncation, deletion --------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Drops every offset >= `offset` (follower truncation). Returns whether anything was
        dropped. Truncating below the log start offset empties the log and starts it at
        `offset`."""
        if offset < 0:
            raise ValueError(f"cannot truncate log {self.dir} to negative offset {offset}")
        with self._lock:
            self._require_open("truncate_to")
            if offset >= self.log_end_offset:
                return False
            log.info("Truncating log %s to offset %d (log end offset %d)", self.dir, offset,
                     self.log_end_offset)
            if offset < self._log_start_offset or offset <= self._segments[0].base_offset:
                self._truncate_fully_and_start_at(offset)
                return True
            for segment in [s for s in self._segments if s.base_offset >= offset]:
                self._remove_segment(segment)
                segment.delete()
            active = self.active_segment
            active.truncate_to(offset)
            self._rolling_ts.pop(active.base_offset, None)
            self.leader_epoch_cache.truncate_from_end(offset)
            self.recovery_point = min(self.recovery_point, offset)
            return True

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        for segment in list(self._segments):
            self._remove_segment(segment)
            segment.delete()
        self._add_segment(self._create_segment(offset))
        self.leader_epoch_cache.clear()
        self._log_start_offset = offset
        self.recovery_point = offset

    def delete_records(self, new_log_start_offset: int) -> int:
        """Moves the log start offset up (Kafka's DeleteRecords); offsets below it can no
        longer be read and the segments wholly below it become deletable (see
        `delete_log_start_offset_breached_segments`). Returns the log start offset.

        Raises:
            OffsetOutOfRangeError: `new_log_start_offset` above the log end offset.
        """
        with self._lock:
            self._require_open("delete_records")
            if new_log_start_offset > self.log_end_offset:
                raise self._out_of_range(new_log_start_offset, "delete-records")
            if new_log_start_offset > self._log_start_offset:
                log.info("Moving the log start offset of %s from %d to %d", self.dir,
                         self._log_start_offset, new_log_start_offset)
                self._log_start_offset = int(new_log_start_offset)
                self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            return self._log_start_offset

    def delete_log_start_offset_breached_segments(self) -> int:
        """Deletes the segments whose offsets are all below the log start offset."""
        return self.delete_segments(
            lambda segment, next_segment: next_segment is not None
            and next_segment.base_offset <= self._log_start_offset)

    def delete_segments(self,
                        predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """The one deletion hook: deletes the oldest segments for which
        `predicate(segment, next_segment_or_None)` holds, stopping at the first for which
        it does not (Kafka's deletableSegments). If every segment qualifies, the log rolls
        first so that an (empty) active segment remains. The log start offset moves up to
        the first remaining segment. Returns how many segments were deleted."""
        with self._lock:
            self._require_open("delete_segments")
            deletable = []
            for j, segment in enumerate(self._segments):
                next_segment = self._segments[j + 1] if j + 1 < len(self._segments) else None
                if not predicate(segment, next_segment):
                    break
                deletable.append(segment)
            if deletable and deletable[-1] is self.active_segment:
                if self.active_segment.size_in_bytes == 0:
                    deletable.pop()
                else:
                    self.roll()
            for segment in deletable:
                log.info("Deleting segment %s (offsets [%d, %d], %d bytes) of log %s",
                         segment.log_file.name, segment.base_offset,
                         segment.next_offset() - 1, segment.size_in_bytes, self.dir)
                self._remove_segment(segment)
                segment.delete()
            if deletable:
                first = self._segments[0].base_offset
                if first > self._log_start_offset:
                    self._log_start_offset = first
                    self.leader_epoch_cache.truncate_from_start(first)
                self.recovery_point = max(self.recovery_point, first)
            return len(deletable)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"UnifiedLog(dir={str(self.dir)!r}, log_start_offset={self._log_start_offset}, "
                f"log_end_offset={self.log_end_offset if not self._closed else '?'}, "
                f"segments={len(self._segments)})")
