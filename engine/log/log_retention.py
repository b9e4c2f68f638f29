"""Local retention of one partition directory (Kafka's UnifiedLog.deleteOldSegments and
its rules). `UnifiedLog` holds one `LogRetention` and delegates to it.

- `delete_old_segments` applies retention.ms (by each segment's largest timestamp),
  retention.bytes and the log-start breach; a tiered log with copy enabled uses
  local.retention.* (-2: the totals), deletes only what `may_delete_locally` allows (its
  last offset tiered, Kafka's isSegmentEligibleForDeletion) and rolls a breached active
  segment so that it can be tiered and deleted later.
- Segments deleted by retention are renamed to `.deleted` and unlinked
  `file.delete.delay.ms` later (by a later retention pass or at close), so readers holding
  views of them stay valid meanwhile; a crash leaves names the next load removes.

`LogRetention` keeps only its pending deletions. It reads the offsets and settings of the
log it serves through `RetainedLog` (UnifiedLog's public properties), deletes from the
`LocalLog` and rolls through the callable it is given; it is not thread-safe: `UnifiedLog`
calls it under its lock.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from engine.config import TopicConfig
from engine.log.local_log import DELETED_SUFFIX, LocalLog
from engine.log.producer_state import snapshot_file
from engine.log.segment import LogSegment

__all__ = ["LogRetention", "LogStartOffsetIncrementReason", "RetainedLog"]

# the log records of every part of UnifiedLog keep its logger name
log = logging.getLogger("engine.log.unified_log")


class LogStartOffsetIncrementReason(enum.Enum):
    """Why the log start offset moved (Kafka's LogStartOffsetIncrementReason)."""

    LEADER_OFFSET_INCREMENTED = "leader offset increment"
    CLIENT_RECORD_DELETION = "client delete records request"
    SNAPSHOT_GENERATED = "snapshot generated"
    SEGMENT_DELETION = "segment deletion"


class RetainedLog(Protocol):
    """What retention reads of the log it serves, and the one change it asks of it."""

    @property
    def config(self) -> TopicConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def local_log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def highest_offset_in_remote_storage(self) -> int: ...

    @property
    def remote_log_enabled(self) -> bool: ...

    @property
    def remote_log_copy_disabled(self) -> bool: ...

    def maybe_increment_log_start_offset(self, new_log_start_offset: int,
                                         reason: LogStartOffsetIncrementReason) -> bool: ...


class LogRetention:
    """Local retention of one partition directory (see the module notes).

    Args:
        log: the log's offsets and settings.
        local: its segments.
        roll: rolls the log at an offset (UnifiedLog's roll: the producer snapshot with it).
    """

    def __init__(self, log: RetainedLog, local: LocalLog, roll: Callable[[int], LogSegment]):
        self._log = log
        self._local = local
        self._roll = roll
        #: (due time in ms, files renamed to `.deleted`) of segments deleted by retention.
        self._pending_deletes: list[tuple[int, list[Path]]] = []

    def _tiered_with_copy(self) -> bool:
        return self._log.remote_log_enabled and not self._log.remote_log_copy_disabled

    def may_delete_locally(self, segment: LogSegment, next_segment: LogSegment | None) -> bool:
        """THE rule for removing a local segment (Kafka's isSegmentEligibleForDeletion and
        its high-watermark guard): never one holding offsets at or above the high watermark;
        and when the log is tiered with copy enabled, only one whose last offset is already
        in the remote tier (<= highest_offset_in_remote_storage), or wholly below the log
        start offset. Every local deletion goes through here."""
        retained = self._log
        upper_bound = (next_segment.base_offset if next_segment is not None
                       else self._local.log_end_offset)
        if retained.high_watermark < upper_bound:
            return False
        if not self._tiered_with_copy():
            return True
        tiered = upper_bound > 0 and upper_bound - 1 <= retained.highest_offset_in_remote_storage
        passed = next_segment is not None and \
            retained.log_start_offset >= next_segment.base_offset
        return tiered or passed

    def delete_old_segments(self) -> int:
        """Kafka's deleteOldSegments: with `cleanup.policy` containing delete, the segments
        breaching retention.ms (by their largest timestamp) or retention.bytes, and in any
        case those below the log start offset. A tiered log with copy enabled uses
        local.retention.ms / local.retention.bytes (-2: the total ones) and deletes only
        tiered segments, moving the local log start offset, not the log start offset; its
        active segment is rolled once it breaches local retention, so that it can be tiered
        and deleted later. Returns how many segments were deleted."""
        self.purge_deleted_files()
        if "delete" in self._log.config["cleanup.policy"]:
            return (self.delete_log_start_offset_breached_segments()
                    + self._delete_retention_size_breached_segments()
                    + self._delete_retention_ms_breached_segments())
        return self.delete_log_start_offset_breached_segments()

    def _delete_retention_ms_breached_segments(self) -> int:
        config = self._log.config
        retention_ms = (config.local_retention_ms if self._tiered_with_copy()
                        else config["retention.ms"])
        if retention_ms < 0:
            return 0
        now = self._local.clock()
        return self.delete_segments(
            lambda segment, _next: now - segment.largest_timestamp > retention_ms,
            f"retention time {retention_ms} ms breach")

    def _delete_retention_size_breached_segments(self) -> int:
        config = self._log.config
        retention_bytes = (config.local_retention_bytes if self._tiered_with_copy()
                           else config["retention.bytes"])
        size = self._local.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = [size - retention_bytes]

        def breached(segment: LogSegment, _next) -> bool:
            if excess[0] - segment.size_in_bytes < 0:
                return False
            excess[0] -= segment.size_in_bytes
            return True

        return self.delete_segments(breached, f"retention size {retention_bytes} bytes breach")

    def delete_log_start_offset_breached_segments(self) -> int:
        """Deletes the segments whose offsets are all below the log start offset (the local
        log start offset for a tiered log with copy enabled)."""
        start = (self._log.local_log_start_offset if self._tiered_with_copy()
                 else self._log.log_start_offset)
        return self.delete_segments(
            lambda segment, next_segment: next_segment is not None
            and next_segment.base_offset <= start, f"log start offset {start} breach")

    def delete_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                        reason: str = "deletion requested") -> int:
        """Kafka's deletableSegments + deleteSegments: the oldest segments passing
        `predicate` and `may_delete_locally`, up to the first that does not."""
        deletable, should_roll = [], False
        tiered = self._tiered_with_copy()
        segments, high_watermark = self._local.segments, self._log.high_watermark
        for j, segment in enumerate(segments):
            next_segment = segments[j + 1] if j + 1 < len(segments) else None
            upper_bound = (next_segment.base_offset if next_segment is not None
                           else self._local.log_end_offset)
            breached = high_watermark >= upper_bound and predicate(segment, next_segment)
            if breached and tiered and next_segment is None and segment.size_in_bytes > 0:
                should_roll = True  # Kafka's RollAndOffloadActiveSegment
            if (breached and not (next_segment is None and segment.size_in_bytes == 0)
                    and self.may_delete_locally(segment, next_segment)):
                deletable.append(segment)
            else:
                break
        if should_roll:
            log.info("Rolling the active segment of %s: it breaches the local retention (%s) "
                     "and must be tiered before it can go", self._local.dir, reason)
            self._roll(self._local.log_end_offset)
        return self._delete_segment_list(deletable, reason)

    def _delete_segment_list(self, deletable: list[LogSegment], reason: str) -> int:
        if not deletable:
            return 0
        if len(deletable) == len(self._local.segments):
            # At least one segment must remain: roll an empty one first (Kafka's rule).
            self._roll(self._local.log_end_offset)
        for segment in deletable:
            log.info("Deleting segment %s (offsets [%d, %d], %d bytes, largest timestamp "
                     "%d) of log %s: %s", segment.log_file.name, segment.base_offset,
                     segment.next_offset() - 1, segment.size_in_bytes,
                     segment.max_timestamp_so_far, self._local.dir, reason)
            self._local.remove_segment(segment)
            self._delete_segment_async(segment)
        self.purge_deleted_files()
        first = self._local.segments[0].base_offset
        if not self._tiered_with_copy() and first > self._log.log_start_offset:
            self._log.maybe_increment_log_start_offset(
                first, LogStartOffsetIncrementReason.SEGMENT_DELETION)
        self._local.recovery_point = max(self._local.recovery_point, first)
        return len(deletable)

    def _delete_segment_async(self, segment: LogSegment) -> None:
        """Kafka's asynchronous delete: the segment's files and the producer snapshot named
        by its base offset are renamed to `<name>.deleted` at once (a crash leaves names
        the next load removes) and unlinked `file.delete.delay.ms` later, by a later
        retention pass or `close` (reads holding views of it stay valid meanwhile)."""
        files = [segment.log_file, segment.offset_index.file, segment.time_index.file,
                 segment.txn_index.file, snapshot_file(self._local.dir, segment.base_offset)]
        renamed = []
        for path in files:
            if path is None:
                continue
            target = Path(str(path) + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        segment.delete()  # closes its handles; nothing is left under the old names
        due = self._local.clock() + self._log.config["file.delete.delay.ms"]
        self._pending_deletes.append((due, renamed))

    def purge_deleted_files(self, everything: bool = False) -> None:
        now = self._local.clock()
        keep = []
        for due, files in self._pending_deletes:
            if everything or due <= now:
                for path in files:
                    path.unlink(missing_ok=True)
            else:
                keep.append((due, files))
        self._pending_deletes = keep
