"""The segments of one partition directory (Kafka's `LocalLog`): the segment list, roll,
read and flush; the `LocalLog` part of `UnifiedLog`.

Kafka's rules kept here:

- Rolling before an append when the active segment's size > segment.bytes - incoming size,
  an index is full, the largest incoming offset does not fit relative to the base offset,
  or the incoming max timestamp is more than segment.ms past the segment's first batch's
  max timestamp (its creation time when it has no timestamp), minus the segment's jitter:
  a random value in [0, min(segment.jitter.ms, segment.ms)) drawn when the segment is
  created or loaded (0 when segment.jitter.ms is 0), so that partitions do not all roll at
  once.
- Reads come from one segment, as Kafka's: whole batches from the one holding the offset;
  nothing framed where a segment should hold the offset is damage (CorruptRecordError at
  the byte where batches stop framing, or CorruptIndexError when the `.log` frames but its
  offset index led astray), never an empty answer that stalls a consumer.
- A roll writes the producer snapshot named by the new segment's base offset without
  fsync; `flush` syncs it with the segments.

`LocalLog` holds no state of its own: its methods work on the partition state `UnifiedLog`
creates and guard with its one lock (every public method takes it), so the local log,
its loading (`engine.log.log_loader`) and its retention (`engine.log.log_retention`) live
in separate modules over one consistent partition.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.common import fsync_dir
from engine.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
)
from engine.log._abstract_index import INT32_MAX
from engine.log.producer_state import ProducerStateManager
from engine.log.segment import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)

__all__ = ["LocalLog"]

# the log records of every part of UnifiedLog keep its logger name
log = logging.getLogger("engine.log.unified_log")

DELETED_SUFFIX = ".deleted"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_NO_TIMESTAMP = -1
#: draws each segment's roll jitter (a module attribute so that tests can seed it).
_jitter_random = random.Random()


class LocalLog:
    """Segments, roll, read and flush of one partition directory; mixed into `UnifiedLog`,
    whose constructor creates the state below."""

    dir: Path
    recovery_point: int
    _clock: Callable[[], int]
    _lock: threading.RLock
    _closed: bool
    _segments: list[LogSegment]
    _bases: list[int]
    _rolling_ts: dict[int, int]
    _created_ms: dict[int, int]
    _roll_jitter_ms: dict[int, int]
    _segment_bytes: int
    _segment_ms: int
    _segment_jitter_ms: int
    _log_start_offset: int
    _producer_state: ProducerStateManager
    _unsynced_snapshots: set[Path]

    # -- segments -------------------------------------------------------------------------

    def _random_segment_jitter(self) -> int:
        """Kafka's randomSegmentJitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        if self._segment_jitter_ms <= 0:
            return 0
        return _jitter_random.randrange(min(self._segment_jitter_ms, self._segment_ms))

    def _open_segment(self, base: int) -> LogSegment:
        self._created_ms[base] = self._clock()
        self._roll_jitter_ms[base] = self._random_segment_jitter()
        return LogSegment.open(self.dir, base, index_interval_bytes=self.index_interval_bytes,
                               max_index_size=self.segment_index_bytes)

    def _create_segment(self, base: int) -> LogSegment:
        # Stale index files of a segment never written are replaced (Kafka does the same).
        for suffix in _INDEX_SUFFIXES:
            (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
        self._created_ms[base] = self._clock()
        self._roll_jitter_ms[base] = self._random_segment_jitter()
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
        self._roll_jitter_ms.pop(segment.base_offset, None)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

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

    # -- rolling --------------------------------------------------------------------------

    def _rolling_timestamp(self, segment: LogSegment) -> int:
        ts = self._rolling_ts.get(segment.base_offset)
        if ts is None:
            first = segment.translate_offset(segment.base_offset)
            ts = _NO_TIMESTAMP if first is None else int(first["max_timestamp"])
            self._rolling_ts[segment.base_offset] = ts
        return ts

    def _should_roll(self, segment: LogSegment, size: int, max_ts: int,
                     largest: int) -> str | None:
        """Why the active `segment` must roll before this append, None if it need not.
        Runs on every append: attributes only, no config lookup."""
        current = segment.size_in_bytes
        if current > self._segment_bytes - size:
            return (f"size {current} + {size} incoming bytes exceeds "
                    f"segment.bytes {self._segment_bytes}")
        if segment.offset_index.is_full():
            return "offset index full"
        if segment.time_index.is_full():
            return "time index full"
        if not 0 <= largest - segment.base_offset <= INT32_MAX:
            return f"offset {largest} does not fit relative to base {segment.base_offset}"
        if current > 0:
            rolling = self._rolling_ts.get(segment.base_offset)
            if rolling is None:
                rolling = self._rolling_timestamp(segment)
            if rolling >= 0:
                waited = max_ts - rolling
            else:
                waited = self._clock() - self._created_ms.get(segment.base_offset,
                                                              self._clock())
            jitter = self._roll_jitter_ms.get(segment.base_offset, 0)
            if waited > self._segment_ms - jitter:
                return (f"{waited} ms since the segment's first batch exceeds segment.ms "
                        f"{self._segment_ms} minus its jitter {jitter} ms")
        return None

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
        # Kafka's roll: a producer snapshot named by the new segment's base offset, so that
        # recovery of a segment starts from the snapshot at its base (and the tiering copies
        # it with the rolled segment). Written without fsync; the next flush syncs it.
        self._producer_state.map_end_offset = new_base
        self._unsynced_snapshots.add(self._producer_state.take_snapshot(new_base, sync=False))
        return segment

    # -- reading --------------------------------------------------------------------------

    def _out_of_range(self, offset: int, what: str) -> OffsetOutOfRangeError:
        start, end = self._log_start_offset, self.log_end_offset
        return OffsetOutOfRangeError(
            f"{what} offset {offset} of log {self.dir} is out of range: valid offsets are "
            f"[{start}, {end}] (log start offset, log end offset)", offset=offset,
            log_start_offset=start, log_end_offset=end)

    def _out_of_local_range(self, offset: int) -> OffsetOutOfRangeError:
        start, local, end = self._log_start_offset, self.local_log_start_offset, \
            self.log_end_offset
        tiered = (f"; offsets [{start}, {local}) are in the remote tier only"
                  if start < local else "")
        return OffsetOutOfRangeError(
            f"fetch offset {offset} of log {self.dir} is out of the local range "
            f"[{local}, {end}] (local log start offset, log end offset){tiered}",
            offset=offset, log_start_offset=local, log_end_offset=end)

    def read(self, offset: int, max_bytes: int,
             min_one_message: bool = True) -> tuple[memoryview, int]:
        view, next_offset, _, _ = self.read_located(offset, max_bytes, min_one_message)
        return view, next_offset

    def read_located(self, offset: int, max_bytes: int, min_one_message: bool = True
                     ) -> tuple[memoryview, int, LogSegment | None, int]:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first batch
        whole even if larger when `min_one_message`), from one segment as Kafka does.

        `read` returns (zero-copy view, next fetch offset hint): the offset after the last
        batch returned, or `offset` when nothing is (at the log end, or `max_bytes` too
        small); `read_located` adds the segment read and the view's byte position in it
        (None, 0 when nothing is read).

        Raises:
            OffsetOutOfRangeError: `offset` outside [local_log_start_offset,
                log_end_offset] (its `log_start_offset` is the local log start offset;
                offsets below it but not below `log_start_offset` are in the remote tier).
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self._require_open("read")
            end = self.log_end_offset
            if offset < self.local_log_start_offset or offset > end:
                raise self._out_of_local_range(offset)
            if offset == end:
                return memoryview(b""), offset, None, 0
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            for j in range(i, len(self._segments)):
                segment = self._segments[j]
                try:
                    info = segment.read(offset, max_bytes, min_one_message=min_one_message)
                except (CorruptRecordError, InvalidRecordError):
                    # Unframeable bytes where the lookup led: name the file and position.
                    self._diagnose_unreadable(segment, offset)
                    raise
                if info is not None:
                    view = info.records
                    if not view.nbytes:
                        if min_one_message:
                            # Nothing framed at the batch holding `offset`: damage, never
                            # an empty answer that would stall the consumer there.
                            self._diagnose_unreadable(segment, offset)
                        return view, offset, None, 0
                    headers, _ = _records.scan(view, False)
                    return view, int(headers["last_offset"][-1]) + 1, segment, info.position
                # No batch at or after `offset` in this segment: go on to the next one only
                # if the segment really ends below it (a gap between segments), never past
                # damage that hides the batches holding it.
                upper = self._bases[j + 1] if j + 1 < len(self._bases) else end
                if offset < upper:
                    self._diagnose_unreadable(segment, offset)
            return memoryview(b""), offset, None, 0

    @staticmethod
    def _check_framing(segment: LogSegment, what: str, offset: int) -> np.ndarray:
        """The headers of the whole `.log` of `segment`; CorruptRecordError naming the file,
        byte position and offset where batches stop framing, if they do."""
        with open(segment.log_file, "rb") as f:
            data = f.read()
        try:
            headers, valid = _records.scan(data, False)
        except (CorruptRecordError, InvalidRecordError) as exc:
            valid = int(exc.position or 0)
            headers, _ = _records.scan(memoryview(data)[:valid], False)
        last = int(headers["last_offset"][-1]) if len(headers) else segment.base_offset - 1
        if valid < len(data):
            raise CorruptRecordError(
                f"log segment {segment.log_file} is damaged at byte {valid} of "
                f"{len(data)}: no whole batch frames there (last readable offset {last}); "
                f"{what} and the rest of the segment cannot be read (recovery from an "
                f"earlier recovery point truncates it there)", file=segment.log_file,
                position=valid, offset=max(offset, last + 1))
        return headers

    def _diagnose_unreadable(self, segment: LogSegment, offset: int) -> None:
        """Called when `segment` gave nothing for `offset` although it should hold it.
        Scans the whole `.log` (a rare path): raises CorruptRecordError at the first byte
        where batches stop framing, or CorruptIndexError when the `.log` frames but its
        offset index led the lookup astray. Returns when the segment truly has no batch
        at or after `offset` (offsets missing between segments)."""
        headers = self._check_framing(segment, f"fetch offset {offset}", offset)
        hit = np.flatnonzero(headers["last_offset"] >= offset)
        if len(hit):
            row = headers[hit[0]]
            raise CorruptIndexError(
                f"offset index {segment.offset_index.file} of log segment {segment.log_file} "
                f"is damaged: the batch holding offset {offset} is at byte "
                f"{int(row['position'])} but the lookup found nothing (entry for "
                f"{segment.offset_index.lookup(offset)}); delete the index to have it rebuilt",
                file=segment.offset_index.file, offset=offset)

    # -- flushing, closing ----------------------------------------------------------------

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
            self._sync_snapshots()
            self.recovery_point = up_to

    def _sync_snapshots(self) -> None:
        for path in sorted(self._unsynced_snapshots):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted with its segment, or by a truncation
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self._unsynced_snapshots:
            fsync_dir(self.dir)
        self._unsynced_snapshots.clear()

    def _close_segments(self) -> None:
        for segment in self._segments:
            segment.close()
