"""The leader's copy task (Kafka's RemoteLogManager.RLMCopyTask).

Each run copies, in offset order, the segments that are inactive, wholly below the last
stable offset and not yet covered remotely: COPY_SEGMENT_STARTED -> RSM copy ->
custom-metadata size check (KIP-917) -> COPY_SEGMENT_FINISHED -> highest offset in remote
storage. Only then may local retention delete the segment (UnifiedLog's tiered rule).

Each partition's copy state is a `CopyState` (the copied offset and epoch, the metadata gap,
the damaged segment, the retry backoff; `PartitionState.copy`). One `RLMCopier`, built by
the RemoteLogManager with the collaborators it names (RLMM, RSM, metrics, clock, backoff,
copy quota, and the remote-segment deletion it shares with expiration), runs the task:
`initialise_leader` sets the state on the first run as leader (and after a truncation) from
the remote metadata, `copy_once` runs the task and keeps its exponential backoff
(`remote.log.manager.task.retry.backoff.ms` doubling up to `...backoff.max.ms`).

A copy that fails is undone (DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED)
and the run ends; the next run retries after Kafka's exponential backoff. Custom metadata
over `remote.log.metadata.custom.metadata.max.bytes` undoes the copy and cancels copying
for the partition until its leadership changes, as Kafka does.

Unlike Kafka, a missing producer snapshot does not fail the copy (Kafka NPEs there,
KAFKA-16209): the RSM receives None and stores an empty snapshot.

Unlike Kafka, each segment is checked before COPY_SEGMENT_STARTED is written
(`LogSegment.verify_batches`: framing, every batch CRC, offsets continuing from the base
offset to the next segment's): the tier is the long-term copy, and a segment damaged on disk
would otherwise be stored with the checksum of its damaged bytes, so every later check would
pass. The check is one native scan at memory speed over pages the copy reads next anyway.
A damaged segment is not tiered: CorruptRecordError naming the file, byte position and
offset is logged, recorded in `CopyState.corrupt_segment` (status `corrupt_segment`,
gauge RemoteCopyCorruptSegments = 1) and raised as the run's error, and copying of the
partition stops at that segment (nothing after it is copied; local retention keeps it,
as it is not tiered). Later runs fail at once without scanning again while the file is the
same one (size, mtime, inode). The operator acts by replacing or repairing the segment
(e.g. a good copy from another replica: its bytes change, the next run checks it again and
copies on), by DeleteRecords past it (its records are given up: the copier starts above
the log start offset), or by a leadership change or restart (a fresh check, for damage
that was only a bad read).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from engine.errors import (
    CorruptRecordError,
    CustomMetadataSizeLimitExceededError,
    RemoteLogMetadataGapError,
)
from engine.log.checkpoint import epoch_entries_in_range
from engine.log.segment import LogSegment
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.storage import LogSegmentData
from engine.rlm.lineage import find_highest_remote_offset, find_log_start_offset

if TYPE_CHECKING:
    from engine.log.unified_log import UnifiedLog
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.remote.storage import RemoteStorageManager
    from engine.rlm.metrics import RLMMetrics
    from engine.rlm.pools import ExponentialBackoff
    from engine.rlm.quota import CopyQuotaWaiter

__all__ = ["CopiedPartition", "CopyState", "RLMCopier", "candidate_segments", "copy_lag",
           "gap_error"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class CopyState:
    """The copy task's state of one partition (the fields of Kafka's RLMCopyTask)."""

    #: (copied offset, epoch) of the last segment known to be copied (Kafka's copiedOffset)
    copied_offset: int = -1
    copied_epoch: int = -1
    initialised: bool = False
    #: the log's truncation_epoch when the state was initialised: a truncation since then
    #: (offsets dropped and written again) makes the copied offset stale
    truncation_epoch: int = 0
    #: why copying stopped until the next leadership change (custom metadata too large)
    copy_cancelled: str | None = None
    segment_ids_being_copied: set[RemoteLogSegmentId] = field(default_factory=set)
    #: copies of ours whose undo failed: the expiration task deletes them
    abandoned_copy_ids: set[RemoteLogSegmentId] = field(default_factory=set)
    #: (base offset, started at ms) of the segment being copied now
    copy_in_progress: tuple[int, int] | None = None
    #: why the log start offset is not covered by the remote log metadata (a lost
    #: metadata directory): no copy, no expiration, no remote read below the local start
    metadata_gap: str | None = None
    #: the damaged local segment copying stopped at: file, position, offset, error and
    #: the file's (size, mtime_ns, inode) when checked (see the module notes)
    corrupt_segment: dict | None = None
    #: (file, (size, mtime_ns, inode)) of the last segment that passed the check
    checked_segment: tuple | None = None
    #: failed runs in a row, and when the next may run (the retry backoff)
    copy_failures: int = 0
    next_copy_attempt_ms: int = 0
    last_copy_error: str | None = None
    copy_lag_bytes: int = 0
    copy_lag_segments: int = 0

    def needs_initialisation(self, unified: UnifiedLog) -> bool:
        return not self.initialised or unified.truncation_epoch != self.truncation_epoch

    def carry_over(self, old: CopyState) -> None:
        """Keeps what a new leadership must not forget: the copies in flight and the
        abandoned ones (the old state's copy may still be running)."""
        self.segment_ids_being_copied = old.segment_ids_being_copied
        self.abandoned_copy_ids = old.abandoned_copy_ids


class CopiedPartition(Protocol):
    """What the copier reads of a partition (engine.rlm.state.PartitionState)."""

    topic: str
    partition: int
    tip: TopicIdPartition
    log: UnifiedLog
    leader_epoch: int
    is_leader: bool
    deleted_partition: bool
    copy: CopyState
    copy_lock: threading.Lock

    @property
    def name(self) -> str: ...


def candidate_segments(unified, copied_offset: int, lso: int) -> list[tuple[LogSegment, int]]:
    """(segment, next segment's base offset) of every segment to copy, in offset order:
    those ending at or after max(copied_offset + 1, log start offset) whose next segment
    starts at or below the last stable offset. The active segment is never one."""
    if lso <= 0 or copied_offset >= lso:
        return []
    from_offset = max(copied_offset + 1, unified.log_start_offset)
    segments = unified.segments
    out = []
    for segment, following in itertools.pairwise(segments):
        if following.base_offset <= from_offset:
            continue
        if following.base_offset > lso:
            break
        out.append((segment, following.base_offset))
    return out


def copy_lag(unified) -> tuple[int, int]:
    """(RemoteCopyLagBytes, RemoteCopyLagSegments): local segments starting at or after the
    highest offset in remote storage, minus the active one (Kafka's definition)."""
    highest = unified.highest_offset_in_remote_storage
    segments = unified.segments
    lagging = [s for s in segments if s.base_offset >= highest]
    size = sum(s.size_in_bytes for s in lagging) - segments[-1].size_in_bytes
    return max(0, size), max(0, len(lagging) - 1)


def gap_error(st: CopiedPartition, offset: int | None = None) -> RemoteLogMetadataGapError:
    return RemoteLogMetadataGapError(f"{st.name}: {st.copy.metadata_gap}", offset=offset,
                                     partition=(st.topic, st.partition))


def _segment_data(unified, segment: LogSegment, next_base: int) -> LogSegmentData:
    txn = segment.txn_index
    snapshot = unified.producer_snapshot_file(next_base)
    if snapshot is None:
        log.info("No producer snapshot at offset %d in %s; the segment is copied with an "
                 "empty one", next_base, unified.dir)
    return LogSegmentData(
        log_segment=segment.log_file,
        offset_index=segment.offset_index.file,
        time_index=segment.time_index.file,
        transaction_index=None if txn.is_empty() else txn.file,
        producer_snapshot=snapshot,
        leader_epoch_index=unified.leader_epoch_checkpoint_text(next_base))


def _file_identity(path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_size, info.st_mtime_ns, info.st_ino


class RLMCopier:
    """Runs the copy task of the partitions it is given (see the module notes).

    Args:
        rlmm, rsm: the plugins.
        metrics: the RemoteLogManager's metrics.
        clock: now in ms.
        backoff: the retry backoff of failed runs.
        copy_quota: waits while `remote.log.manager.copy.max.bytes.per.second` is exceeded.
        broker_id: stamped on metadata events.
        custom_metadata_max_bytes: `remote.log.metadata.custom.metadata.max.bytes`.
        interval_ms: the delay before the next run after a successful one.
        closed: whether the RemoteLogManager is closing (a run stops after its segment).
        delete_remote_segment: the RemoteLogManager's deletion of one remote segment
            (DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED).
    """

    def __init__(self, *, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                 metrics: RLMMetrics, clock: Callable[[], int], backoff: ExponentialBackoff,
                 copy_quota: CopyQuotaWaiter, broker_id: int, custom_metadata_max_bytes: int,
                 interval_ms: int, closed: Callable[[], bool],
                 delete_remote_segment: Callable[[CopiedPartition, RemoteLogSegmentMetadata,
                                                  bytes | None], None]):
        self.rlmm, self.rsm, self.metrics = rlmm, rsm, metrics
        self.clock, self.backoff, self.copy_quota = clock, backoff, copy_quota
        self.broker_id = broker_id
        self.custom_metadata_max_bytes = custom_metadata_max_bytes
        self.interval_ms = interval_ms
        self.closed = closed
        self.delete_remote_segment = delete_remote_segment

    def initialise_leader(self, st: CopiedPartition) -> None:
        """First copy run as leader: the log start offset from the remote tier, and the
        highest copied offset of the lineage (no duplicate uploads after a leader change).

        A log start offset below the local one that the remote metadata does not cover
        (`metadata_gap`) is left as it is: `st.copy.metadata_gap` says why, the state stays
        uninitialised (every run checks again: restoring the metadata and restarting
        resumes tiering) and the copy, expiration and remote reads refuse the partition."""
        unified = st.log
        entries = unified.leader_epoch_cache.entries
        offset, epoch = find_highest_remote_offset(self.rlmm, st.tip, entries,
                                                   unified.log_end_offset)
        gap = self.metadata_gap(st, offset)
        if gap != st.copy.metadata_gap and gap is not None:
            log.error("%s: %s", st.name, gap)
        elif gap != st.copy.metadata_gap:
            log.info("%s: the remote log metadata covers the log start offset again",
                     st.name)
        st.copy.metadata_gap = gap
        if gap is not None:  # what the copy run would fail with, for status in any process
            exc = gap_error(st)
            st.copy.last_copy_error = f"{type(exc).__name__}: {exc}"
            return
        st.copy.truncation_epoch = unified.truncation_epoch
        if entries and entries[0].start_offset > unified.log_start_offset:
            # the cache does not reach back to the log start offset: a lost log-start
            # checkpoint, or a lost leader-epoch-checkpoint rebuilt from the local segments
            # (older epochs unknown). The earliest copied segment of any epoch is the start.
            start = min((md.start_offset for md in self.rlmm.list_remote_log_segments(st.tip)
                         if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                        default=None)
        else:
            start = find_log_start_offset(self.rlmm, st.tip, entries)
        if start is None:  # Kafka's findLogStartOffset falls back to the local one
            start = unified.local_log_start_offset
        if start > unified.log_start_offset:
            unified.maybe_increment_log_start_offset(start, "SegmentDeletion")
        st.copy.copied_offset, st.copy.copied_epoch = offset, epoch
        unified.update_highest_offset_in_remote_storage(offset)
        st.copy.initialised = True
        log.info("%s: leader epoch %d, highest copied offset %d (epoch %d)", st.name,
                 st.leader_epoch, offset, epoch)

    def metadata_gap(self, st: CopiedPartition, highest_copied: int) -> str | None:
        """Why the log start offset is not covered, or None: it lies below the local log
        start offset and no copied segment the remote metadata knows of (finished, being
        deleted, or counted in an epoch's highest offset, which outlives deletion) reaches
        the local start. Raising the log start offset to the local one then (Kafka's
        fallback) would make the lost metadata's segments unreachable for good."""
        unified = st.log
        start, local = unified.log_start_offset, unified.local_log_start_offset
        if start >= local:
            return None
        reach = highest_copied
        for md in self.rlmm.list_remote_log_segments(st.tip):
            if md.state in (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                            RemoteLogSegmentState.DELETE_SEGMENT_STARTED):
                reach = max(reach, md.end_offset)
        if reach >= local - 1:
            return None
        return (f"the log start offset {start} is below the local log start offset {local} "
                f"but the remote log metadata of {st.tip} reaches only offset {reach}: "
                f"offsets [{max(start, reach + 1)}, {local - 1}] are in neither tier (the "
                f"partition's metadata lost or replaced, e.g. its directory under "
                f"__remote_log_metadata); the partition is not tiered or expired and its log "
                f"start offset is kept until the metadata is restored, or DeleteRecords to "
                f"{local} accepts the loss")

    def copy_once(self, st: CopiedPartition, honour_backoff: bool) -> tuple[int, int, int]:
        """One copy run with error handling. Returns (delay ms before the next run, segments
        copied, bytes copied)."""
        state = st.copy
        now = self.clock()
        if honour_backoff and now < state.next_copy_attempt_ms:
            return state.next_copy_attempt_ms - now, 0, 0
        progress = [0, 0]
        try:
            self.run_copy(st, progress)
        except Exception as exc:
            self.metrics.mark("RemoteCopyErrorsPerSec", st.topic)
            state.last_copy_error = f"{type(exc).__name__}: {exc}"
            delay = self.backoff.backoff(state.copy_failures)
            state.copy_failures += 1
            state.next_copy_attempt_ms = self.clock() + delay
            log.warning("Copy task of %s failed (attempt %d; retry in %d ms): %s", st.name,
                        state.copy_failures, delay, state.last_copy_error)
            return delay, progress[0], progress[1]
        state.copy_failures = 0
        state.next_copy_attempt_ms = 0
        state.last_copy_error = None
        return self.interval_ms, progress[0], progress[1]

    def run_copy(self, st: CopiedPartition, progress: list[int]) -> None:
        """One run of the copy task; `progress` ([segments, bytes]) counts what it copied.
        Raises the error that stopped the run (the segments before it stay copied)."""
        unified = st.log
        if st.copy.copy_cancelled or not st.is_leader:
            return
        if st.copy.needs_initialisation(unified):
            self.initialise_leader(st)
        if st.copy.metadata_gap is not None:  # see metadata_gap
            raise gap_error(st)
        if unified.remote_log_copy_disabled:
            return
        try:
            lso = unified.last_stable_offset
            candidates = candidate_segments(unified, st.copy.copied_offset, lso)
            known = st.copy.corrupt_segment
            if known is not None and all(str(s.log_file) != known["file"] for s, _ in candidates):
                self._clear_corrupt(st, "is no longer to be copied (below the log start offset)")
            for segment, next_base in candidates:
                if self.closed() or st.copy.copy_cancelled or st.deleted_partition:
                    break
                self.copy_segment(st, segment, next_base)
                progress[0] += 1
                progress[1] += segment.size_in_bytes
        finally:
            state = st.copy
            state.copy_lag_bytes, state.copy_lag_segments = copy_lag(unified)
            self.metrics.set_gauge("RemoteCopyLagBytes", st.topic, st.partition,
                                   state.copy_lag_bytes)
            self.metrics.set_gauge("RemoteCopyLagSegments", st.topic, st.partition,
                                   state.copy_lag_segments)

    def check_segment(self, st: CopiedPartition, segment: LogSegment, next_base: int) -> None:
        """Refuses a damaged segment (see the module notes): raises CorruptRecordError. A file
        that passed and is unchanged (size, mtime, inode) is not scanned again."""
        identity = _file_identity(segment.log_file)
        if st.copy.checked_segment == (str(segment.log_file), identity):
            return
        known = st.copy.corrupt_segment
        if known is not None and known["file"] == str(segment.log_file) and \
                known["identity"] == identity:
            raise CorruptRecordError(known["error"], file=known["file"],
                                     position=known["position"], offset=known["offset"])
        try:
            segment.verify_batches(next_base)
        except CorruptRecordError as exc:
            st.copy.corrupt_segment = {"file": str(segment.log_file), "position": exc.position,
                                       "offset": exc.offset, "error": str(exc),
                                       "identity": identity}
            self.metrics.set_gauge("RemoteCopyCorruptSegments", st.topic, st.partition, 1)
            log.error("Not tiering %s of %s: %s. Copying of %s stops at offset %d until the "
                      "segment is replaced or repaired, DeleteRecords passes it, or the "
                      "leadership changes", segment.log_file, st.name, exc, st.name,
                      segment.base_offset)
            raise
        st.copy.checked_segment = (str(segment.log_file), identity)
        if known is not None:
            self._clear_corrupt(st, "checks out again")

    def check_next_segment(self, st: CopiedPartition) -> None:
        """Checks the segment the next copy run starts with, so that `status` in any process
        shows a damaged one (st.copy.corrupt_segment); skipped while a copy run holds the
        partition (it checks the segment itself)."""
        if not st.copy_lock.acquire(blocking=False):
            return
        try:
            unified, state = st.log, st.copy
            if state.copy_cancelled or unified.remote_log_copy_disabled or \
                    state.needs_initialisation(unified):
                return
            candidates = candidate_segments(unified, state.copied_offset,
                                            unified.last_stable_offset)
            if candidates:
                try:
                    self.check_segment(st, *candidates[0])
                except CorruptRecordError as exc:  # recorded in state.corrupt_segment, logged
                    state.last_copy_error = state.last_copy_error or \
                        f"{type(exc).__name__}: {exc}"
        finally:
            st.copy_lock.release()

    def _clear_corrupt(self, st: CopiedPartition, why: str) -> None:
        log.info("The damaged segment %s of %s %s: copying resumes",
                 st.copy.corrupt_segment["file"], st.name, why)
        st.copy.corrupt_segment = None
        self.metrics.set_gauge("RemoteCopyCorruptSegments", st.topic, st.partition, 0)

    def copy_segment(self, st: CopiedPartition, segment: LogSegment, next_base: int) -> None:
        """Copies one segment (see the module notes)."""
        unified = st.log
        size = segment.size_in_bytes
        self.check_segment(st, segment, next_base)  # before anything is written or throttled
        self.copy_quota.wait_and_record(size)
        epochs = epoch_entries_in_range(unified.leader_epoch_cache.entries, segment.base_offset,
                                        next_base)
        if not epochs:
            raise ValueError(f"segment {segment.log_file} (offsets [{segment.base_offset}, "
                             f"{next_base - 1}]) has no leader epoch: it cannot be tiered")
        segment_id = RemoteLogSegmentId.generate_new(st.tip)
        metadata = RemoteLogSegmentMetadata(
            segment_id, segment.base_offset, next_base - 1, segment.largest_timestamp,
            self.broker_id, self.clock(), size, {e.epoch: e.start_offset for e in epochs},
            txn_idx_empty=segment.txn_index.is_empty())
        st.copy.segment_ids_being_copied.add(segment_id)
        st.copy.copy_in_progress = (segment.base_offset, self.clock())
        try:
            self.rlmm.add_remote_log_segment_metadata(metadata)
            self.metrics.mark("RemoteCopyRequestsPerSec", st.topic)
            try:
                custom = self.rsm.copy_log_segment_data(metadata,
                                                       _segment_data(unified, segment, next_base))
            except BaseException:
                self._undo_copy(st, metadata, None)
                raise
            limit = self.custom_metadata_max_bytes
            if custom is not None and len(custom) > limit:
                self._undo_copy(st, metadata, custom)
                st.copy.copy_cancelled = (
                    f"custom metadata of {len(custom)} bytes from the RSM exceeds "
                    f"remote.log.metadata.custom.metadata.max.bytes ({limit})")
                raise CustomMetadataSizeLimitExceededError(
                    f"copy of {segment.log_file} undone and copying of {st.name} cancelled until "
                    f"its leadership changes: {st.copy.copy_cancelled}", file=segment.log_file,
                    offset=segment.base_offset)
            try:
                self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                    segment_id, self.clock(), custom, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                    self.broker_id))
            except BaseException:
                # the copy stays unfinished and is retried as a new one: this one is garbage
                self._undo_copy(st, metadata, custom)
                raise
        finally:
            st.copy.segment_ids_being_copied.discard(segment_id)
            st.copy.copy_in_progress = None
        self.metrics.mark("RemoteCopyBytesPerSec", st.topic, size)
        st.copy.copied_offset, st.copy.copied_epoch = next_base - 1, epochs[-1].epoch
        unified.update_highest_offset_in_remote_storage(next_base - 1)
        log.info("Copied %s (offsets [%d, %d], %d bytes) of %s to remote storage as %s",
                 segment.log_file.name, segment.base_offset, next_base - 1, size, st.name,
                 segment_id.id)

    def _undo_copy(self, st: CopiedPartition, metadata: RemoteLogSegmentMetadata,
                   custom: bytes | None) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED for a partial or
        refused copy. A failure here leaves the entry for the expiration task to finish."""
        try:
            self.delete_remote_segment(st, metadata, custom)
        except Exception as exc:
            st.copy.abandoned_copy_ids.add(metadata.remote_log_segment_id)
            log.warning("Could not delete the partial copy %s of %s (the expiration task "
                        "retries): %s", metadata.remote_log_segment_id.id, st.name, exc)
            # the entry may already be past DELETE_SEGMENT_STARTED (the partition was deleted
            # while this copy was in the RSM): its files are ours to remove all the same
            try:
                self.rsm.delete_log_segment_data(metadata)
            except Exception as rsm_exc:
                log.warning("Deleting the files of the partial copy %s of %s failed: %s",
                            metadata.remote_log_segment_id.id, st.name, rsm_exc)
