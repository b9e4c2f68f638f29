"""The segments of one partition directory (Kafka's `LocalLog`): the segment list, roll,
read and flush. `UnifiedLog` holds one and delegates to it.

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
- `flush` syncs the segments holding offsets from the recovery point on; `mark_flushed`
  moves the recovery point (Kafka's LocalLog.flush and markFlushed).

Like Kafka's LocalLog, it knows nothing of the log start offset, the producer state or the
epoch cache (those are `UnifiedLog`'s), and it is not thread-safe: `UnifiedLog` calls it
under its lock.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.config import TopicConfig
from engine.errors import CorruptIndexError, CorruptRecordError, InvalidRecordError
from engine.log._abstract_index import INT32_MAX
from engine.log.segment import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from engine.log.transaction_index import AbortedTxn
from engine.records import MemoryRecords

__all__ = ["LocalLog"]

DELETED_SUFFIX = ".deleted"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_NO_TIMESTAMP = -1
#: draws each segment's roll jitter (a module attribute so that tests can seed it).
_jitter_random = random.Random()


class LocalLog:
    """Segments, roll, read and flush of one partition directory (see the module notes).

    `segments` and `bases` (their base offsets) are the live lists, in offset order: read
    them, change them only through `add_segment` / `remove_segment`.
    """

    def __init__(self, directory: Path, config: TopicConfig, recovery_point: int,
                 clock: Callable[[], int]):
        self.dir = directory
        self.recovery_point = recovery_point
        self.clock = clock
        self.segments: list[LogSegment] = []
        self.bases: list[int] = []
        #: base offset -> the segment's rolling timestamp (first batch's max timestamp, or
        #: its creation time when it has none), filled lazily.
        self._rolling_ts: dict[int, int] = {}
        self._created_ms: dict[int, int] = {}
        #: base offset -> the segment's roll jitter (Kafka's LogSegment.rollJitterMs).
        self._roll_jitter_ms: dict[int, int] = {}
        self.update_config(config)

    def update_config(self, config: TopicConfig) -> None:
        """Takes the segment settings of `config` (later segments and rolls use them)."""
        # The roll check reads these on every append: plain attributes, not config lookups.
        self._segment_bytes: int = config["segment.bytes"]
        self._segment_ms: int = config["segment.ms"]
        self._segment_jitter_ms: int = config["segment.jitter.ms"]
        self._index_interval_bytes: int = config["index.interval.bytes"]
        self._segment_index_bytes: int = config["segment.index.bytes"]

    # -- segments -------------------------------------------------------------------------

    def _random_segment_jitter(self) -> int:
        """Kafka's randomSegmentJitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        if self._segment_jitter_ms <= 0:
            return 0
        return _jitter_random.randrange(min(self._segment_jitter_ms, self._segment_ms))

    def open_segment(self, base: int) -> LogSegment:
        """The existing segment at `base` (not added to the list)."""
        self._created_ms[base] = self.clock()
        self._roll_jitter_ms[base] = self._random_segment_jitter()
        return LogSegment.open(self.dir, base, index_interval_bytes=self._index_interval_bytes,
                               max_index_size=self._segment_index_bytes)

    def create_segment(self, base: int) -> LogSegment:
        """A new empty segment at `base` (not added to the list)."""
        # Stale index files of a segment never written are replaced (Kafka does the same).
        for suffix in _INDEX_SUFFIXES:
            (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
        self._created_ms[base] = self.clock()
        self._roll_jitter_ms[base] = self._random_segment_jitter()
        return LogSegment.create(self.dir, base,
                                 index_interval_bytes=self._index_interval_bytes,
                                 max_index_size=self._segment_index_bytes)

    def add_segment(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self.bases, segment.base_offset)
        self.bases.insert(i, segment.base_offset)
        self.segments.insert(i, segment)

    def remove_segment(self, segment: LogSegment) -> None:
        """Takes `segment` out of the list (its files are the caller's to delete)."""
        i = self.segments.index(segment)
        del self.segments[i]
        del self.bases[i]
        self._rolling_ts.pop(segment.base_offset, None)
        self._created_ms.pop(segment.base_offset, None)
        self._roll_jitter_ms.pop(segment.base_offset, None)

    def delete_segments(self, segments: list[LogSegment]) -> None:
        """Removes `segments` and deletes their files at once."""
        for segment in segments:
            self.remove_segment(segment)
            segment.delete()

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset()

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size_in_bytes for s in self.segments)

    def segment_index_at(self, offset: int) -> int:
        """The index in `segments` of the segment that would hold `offset` (0 below the
        first)."""
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    # -- rolling, appending ---------------------------------------------------------------

    def _rolling_timestamp(self, segment: LogSegment) -> int:
        ts = self._rolling_ts.get(segment.base_offset)
        if ts is None:
            first = segment.translate_offset(segment.base_offset)
            ts = _NO_TIMESTAMP if first is None else int(first["max_timestamp"])
            self._rolling_ts[segment.base_offset] = ts
        return ts

    def should_roll(self, segment: LogSegment, size: int, max_ts: int,
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
                waited = self.clock() - self._created_ms.get(segment.base_offset,
                                                             self.clock())
            jitter = self._roll_jitter_ms.get(segment.base_offset, 0)
            if waited > self._segment_ms - jitter:
                return (f"{waited} ms since the segment's first batch exceeds segment.ms "
                        f"{self._segment_ms} minus its jitter {jitter} ms")
        return None

    def roll(self, new_base: int) -> LogSegment:
        """Kafka's LocalLog.roll: a new active segment at `new_base` (an empty active
        segment is replaced, or kept when it already starts there). Returns it."""
        active = self.active_segment
        if active.size_in_bytes == 0:
            if active.base_offset == new_base:
                return active
            self.remove_segment(active)
            active.delete()
        else:
            active.on_become_inactive_segment()
        segment = self.create_segment(new_base)
        self.add_segment(segment)
        return segment

    def append(self, segment: LogSegment, largest: int, max_ts: int, shallow: int, data,
               headers: np.ndarray, first_max_ts: int) -> None:
        """Appends validated batches to the active `segment`; `first_max_ts` (the first
        batch's max timestamp) becomes its rolling timestamp when it was empty."""
        was_empty = segment.size_in_bytes == 0
        segment.append(largest, max_ts, shallow, data, headers)
        if was_empty:
            self._rolling_ts[segment.base_offset] = first_max_ts

    def truncate_to(self, offset: int) -> None:
        """Deletes the segments starting at or above `offset` and truncates the one holding
        it (the caller keeps at least one segment: `offset` above the first base)."""
        self.delete_segments([s for s in self.segments if s.base_offset >= offset])
        active = self.active_segment
        active.truncate_to(offset)
        self._rolling_ts.pop(active.base_offset, None)

    # -- reading --------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one_message: bool
             ) -> tuple[memoryview, int, LogSegment | None, int]:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first batch
        whole even if larger when `min_one_message`), from one segment as Kafka does:
        (zero-copy view, next fetch offset, segment read, the view's byte position in it);
        (empty, `offset`, None, 0) when nothing is read. The caller checked that `offset`
        lies in the local range (UnifiedLog.read)."""
        end = self.log_end_offset
        if offset == end:
            return memoryview(b""), offset, None, 0
        bases = self.bases
        for j in range(self.segment_index_at(offset), len(self.segments)):
            segment = self.segments[j]
            try:
                info = segment.read(offset, max_bytes, min_one_message=min_one_message)
            except (CorruptRecordError, InvalidRecordError):
                # Unframeable bytes where the lookup led: name the file and position.
                self.diagnose_unreadable(segment, offset)
                raise
            if info is not None:
                view = info.records
                if not view.nbytes:
                    if min_one_message:
                        # Nothing framed at the batch holding `offset`: damage, never an
                        # empty answer that would stall the consumer there.
                        self.diagnose_unreadable(segment, offset)
                    return view, offset, None, 0
                headers, _ = _records.scan(view, False)
                return view, int(headers["last_offset"][-1]) + 1, segment, info.position
            # No batch at or after `offset` in this segment: go on to the next one only if
            # the segment really ends below it (a gap between segments), never past damage
            # that hides the batches holding it.
            upper = bases[j + 1] if j + 1 < len(bases) else end
            if offset < upper:
                self.diagnose_unreadable(segment, offset)
        return memoryview(b""), offset, None, 0

    # -- lookups ---------------------------------------------------------------------------

    def collect_aborted_transactions(self, start_offset: int,
                                     upper_bound_offset: int) -> list[AbortedTxn]:
        """Kafka's LocalLog.collectAbortedTransactions: from the segment holding
        `start_offset` on, stopping at the first complete search (see
        UnifiedLog.collect_aborted_transactions)."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self.segment_index_at(start_offset):]:
            result = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
        return found

    def find_offset_by_timestamp(self, timestamp: int,
                                 start: int) -> tuple[int, int, int | None] | None:
        """(offset, timestamp, leader epoch or None) of the first record at or after
        `timestamp` at or above offset `start`, None if there is none."""
        for segment in self.segments:
            if segment.size_in_bytes and segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return found.offset, found.timestamp, found.leader_epoch
                # The segment's largest timestamp says the record is here: a miss is damage
                # hiding it, never a reason to answer from a later segment.
                if segment.next_offset() > start:
                    self.check_framing(segment, f"timestamp lookup {timestamp}", start)
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int, int | None] | None:
        """ListOffsets MAX_TIMESTAMP: the first record carrying the largest timestamp, in
        the first batch that carries it (Kafka answers with that record's offset, not the
        batch's)."""
        best = max(self.segments, key=lambda s: s.max_timestamp_so_far)
        max_ts = best.max_timestamp_so_far
        if max_ts < 0:
            return None
        offset = best.shallow_offset_of_max_timestamp_so_far
        hit = best.translate_offset(offset)
        if hit is None:
            return offset, max_ts, None
        epoch = int(hit["partition_leader_epoch"])
        info = best.read(int(hit["base_offset"]), int(hit["size"]))
        if info is not None and info.records.nbytes:
            cols = MemoryRecords(info.records).decode_columns(0, 1, include_control=False)
            carrying = np.flatnonzero(cols.timestamp == max_ts)
            if len(carrying):
                offset = int(cols.offset[carrying[0]])
            elif cols.num_records:  # LogAppendTime: every record carries the batch's time
                offset = int(cols.offset[0])
        return offset, max_ts, epoch if epoch >= 0 else None

    @staticmethod
    def check_framing(segment: LogSegment, what: str, offset: int) -> np.ndarray:
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

    def diagnose_unreadable(self, segment: LogSegment, offset: int) -> None:
        """Called when `segment` gave nothing for `offset` although it should hold it.
        Scans the whole `.log` (a rare path): raises CorruptRecordError at the first byte
        where batches stop framing, or CorruptIndexError when the `.log` frames but its
        offset index led the lookup astray. Returns when the segment truly has no batch
        at or after `offset` (offsets missing between segments)."""
        headers = self.check_framing(segment, f"fetch offset {offset}", offset)
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

    def flush(self, up_to: int) -> None:
        """fsyncs the segments holding offsets in [recovery point, up_to) (Kafka's
        LocalLog.flush; `mark_flushed` then moves the recovery point)."""
        bases = self.bases
        for j, segment in enumerate(self.segments):
            next_base = bases[j + 1] if j + 1 < len(bases) else None
            if segment.base_offset < up_to and (next_base is None
                                                or next_base > self.recovery_point):
                segment.flush()

    def mark_flushed(self, offset: int) -> None:
        self.recovery_point = max(self.recovery_point, offset)

    def close_segments(self) -> None:
        for segment in self.segments:
            segment.close()
