"""Local retention of one partition directory (Kafka's deleteOldSegments and its rules);
the retention part of `UnifiedLog`.

- `delete_old_segments` applies retention.ms (by each segment's largest timestamp),
  retention.bytes and the log-start breach; a tiered log with copy enabled uses
  local.retention.* (-2: the totals), deletes only what `_may_delete_locally` allows (its
  last offset tiered, Kafka's isSegmentEligibleForDeletion) and rolls a breached active
  segment so that it can be tiered and deleted later.
- Segments deleted by retention are renamed to `.deleted` and unlinked
  `file.delete.delay.ms` later (by a later retention pass or at close), so readers holding
  views of them stay valid meanwhile; a crash leaves names the next load removes.

Like `LocalLog`, `LogRetention` works on the state `UnifiedLog` creates, under its lock.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from pathlib import Path

from engine.config import TopicConfig
from engine.log.local_log import DELETED_SUFFIX, LocalLog
from engine.log.producer_state import snapshot_file
from engine.log.segment import LogSegment

__all__ = ["LogRetention", "LogStartOffsetIncrementReason"]

# the log records of every part of UnifiedLog keep its logger name
log = logging.getLogger("engine.log.unified_log")


class LogStartOffsetIncrementReason(enum.Enum):
    """Why the log start offset moved (Kafka's LogStartOffsetIncrementReason)."""

    LEADER_OFFSET_INCREMENTED = "leader offset increment"
    CLIENT_RECORD_DELETION = "client delete records request"
    SNAPSHOT_GENERATED = "snapshot generated"
    SEGMENT_DELETION = "segment deletion"


class LogRetention(LocalLog):
    """Local retention of one partition directory; mixed into `UnifiedLog`."""

    config: TopicConfig
    _remote_log_enabled: bool
    _highest_offset_in_remote_storage: int
    _pending_deletes: list[tuple[int, list[Path]]]
    maybe_increment_log_start_offset: Callable[..., bool]
    _remote_log_enabled_and_copy_enabled: Callable[[], bool]

    def _may_delete_locally(self, segment: LogSegment, next_segment: LogSegment | None) -> bool:
        """THE rule for removing a local segment (Kafka's isSegmentEligibleForDeletion and
        its high-watermark guard): never one holding offsets at or above the high watermark;
        and when the log is tiered with copy enabled, only one whose last offset is already
        in the remote tier (<= highest_offset_in_remote_storage), or wholly below the log
        start offset. Every local deletion goes through here."""
        upper_bound = (next_segment.base_offset if next_segment is not None
                       else self.log_end_offset)
        if self.high_watermark < upper_bound:
            return False
        if not self._remote_log_enabled_and_copy_enabled():
            return True
        tiered = upper_bound > 0 and upper_bound - 1 <= self._highest_offset_in_remote_storage
        passed = next_segment is not None and self._log_start_offset >= next_segment.base_offset
        return tiered or passed

    def delete_old_segments(self) -> int:
        """Kafka's deleteOldSegments: with `cleanup.policy` containing delete, the segments
        breaching retention.ms (by their largest timestamp) or retention.bytes, and in any
        case those below the log start offset. A tiered log with copy enabled uses
        local.retention.ms / local.retention.bytes (-2: the total ones) and deletes only
        tiered segments, moving the local log start offset, not the log start offset; its
        active segment is rolled once it breaches local retention, so that it can be tiered
        and deleted later. Returns how many segments were deleted."""
        with self._lock:
            self._require_open("delete_old_segments")
            self._purge_deleted_files()
            if "delete" in self.config["cleanup.policy"]:
                return (self._delete_log_start_offset_breached_segments()
                        + self._delete_retention_size_breached_segments()
                        + self._delete_retention_ms_breached_segments())
            return self._delete_log_start_offset_breached_segments()

    def _delete_retention_ms_breached_segments(self) -> int:
        retention_ms = (self.config.local_retention_ms
                        if self._remote_log_enabled_and_copy_enabled()
                        else self.config["retention.ms"])
        if retention_ms < 0:
            return 0
        now = self._clock()
        return self._delete_old_segments(
            lambda segment, _next: now - segment.largest_timestamp > retention_ms,
            f"retention time {retention_ms} ms breach")

    def _delete_retention_size_breached_segments(self) -> int:
        retention_bytes = (self.config.local_retention_bytes
                           if self._remote_log_enabled_and_copy_enabled()
                           else self.config["retention.bytes"])
        size = self.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = [size - retention_bytes]

        def breached(segment: LogSegment, _next) -> bool:
            if excess[0] - segment.size_in_bytes < 0:
                return False
            excess[0] -= segment.size_in_bytes
            return True

        return self._delete_old_segments(breached,
                                         f"retention size {retention_bytes} bytes breach")

    def _delete_log_start_offset_breached_segments(self) -> int:
        start = (self.local_log_start_offset if self._remote_log_enabled_and_copy_enabled()
                 else self._log_start_offset)
        return self._delete_old_segments(
            lambda segment, next_segment: next_segment is not None
            and next_segment.base_offset <= start, f"log start offset {start} breach")

    def _delete_old_segments(self, predicate, reason: str) -> int:
        """Kafka's deletableSegments + deleteSegments: the oldest segments passing
        `predicate` and `_may_delete_locally`, up to the first that does not."""
        deletable, should_roll = [], False
        tiered = self._remote_log_enabled_and_copy_enabled()
        for j, segment in enumerate(self._segments):
            next_segment = self._segments[j + 1] if j + 1 < len(self._segments) else None
            upper_bound = (next_segment.base_offset if next_segment is not None
                           else self.log_end_offset)
            breached = self.high_watermark >= upper_bound and predicate(segment, next_segment)
            if breached and tiered and next_segment is None and segment.size_in_bytes > 0:
                should_roll = True  # Kafka's RollAndOffloadActiveSegment
            if (breached and not (next_segment is None and segment.size_in_bytes == 0)
                    and self._may_delete_locally(segment, next_segment)):
                deletable.append(segment)
            else:
                break
        if should_roll:
            log.info("Rolling the active segment of %s: it breaches the local retention (%s) "
                     "and must be tiered before it can go", self.dir, reason)
            self._roll(self.log_end_offset)
        return self._delete_segment_list(deletable, reason)

    def _delete_segment_list(self, deletable: list[LogSegment], reason: str) -> int:
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            # At least one segment must remain: roll an empty one first (Kafka's rule).
            self._roll(self.log_end_offset)
        for segment in deletable:
            log.info("Deleting segment %s (offsets [%d, %d], %d bytes, largest timestamp "
                     "%d) of log %s: %s", segment.log_file.name, segment.base_offset,
                     segment.next_offset() - 1, segment.size_in_bytes,
                     segment.max_timestamp_so_far, self.dir, reason)
            self._remove_segment(segment)
            self._delete_segment_async(segment)
        self._purge_deleted_files()
        first = self._segments[0].base_offset
        if not self._remote_log_enabled_and_copy_enabled() and first > self._log_start_offset:
            self.maybe_increment_log_start_offset(
                first, LogStartOffsetIncrementReason.SEGMENT_DELETION)
        self.recovery_point = max(self.recovery_point, first)
        return len(deletable)

    def _delete_segment_async(self, segment: LogSegment) -> None:
        """Kafka's asynchronous delete: the segment's files and the producer snapshot named
        by its base offset are renamed to `<name>.deleted` at once (a crash leaves names
        the next load removes) and unlinked `file.delete.delay.ms` later, by a later
        retention pass or `close` (reads holding views of it stay valid meanwhile)."""
        files = [segment.log_file, segment.offset_index.file, segment.time_index.file,
                 segment.txn_index.file, snapshot_file(self.dir, segment.base_offset)]
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
        self._pending_deletes.append((self._clock() + self.config["file.delete.delay.ms"],
                                      renamed))

    def _purge_deleted_files(self, everything: bool = False) -> None:
        now = self._clock()
        keep = []
        for due, files in self._pending_deletes:
            if everything or due <= now:
                for path in files:
                    path.unlink(missing_ok=True)
            else:
                keep.append((due, files))
        self._pending_deletes = keep

    def delete_log_start_offset_breached_segments(self) -> int:
        """Deletes the segments whose offsets are all below the log start offset (the local
        log start offset for a tiered log with copy enabled)."""
        with self._lock:
            self._require_open("delete_log_start_offset_breached_segments")
            return self._delete_log_start_offset_breached_segments()

    def delete_segments(self,
                        predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Deletes the oldest segments for which `predicate(segment, next_segment_or_None)`
        and `_may_delete_locally` hold, stopping at the first for which they do not (Kafka's
        deletableSegments). If every segment qualifies, the log rolls first so that an
        (empty) active segment remains. The log start offset moves up to the first remaining
        segment (the local log start offset only, for a tiered log with copy enabled).
        Returns how many segments were deleted."""
        with self._lock:
            self._require_open("delete_segments")
            return self._delete_old_segments(predicate, "deletion requested")
