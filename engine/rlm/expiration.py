"""The leader's expiration task (Kafka's RemoteLogManager.RLMExpirationTask) and the
deletion of remote data: one segment (the copy task undoes a failed copy with it) or a whole
partition.

One `RLMExpirationTask`, built by the RemoteLogManager with the collaborators it names
(RLMM, RSM, index cache, metrics, clock, backoff, and the copy task's initialisation of a
leader's state), runs the task of every partition it is given.

`plan_expiration` decides, without changing anything, which remote segments go:

- orphans: COPY_SEGMENT_STARTED entries not being copied now (a copy interrupted by a crash)
  and DELETE_SEGMENT_STARTED entries (an interrupted delete), retried every run;
- in the leader-epoch lineage, in epoch then offset order: a segment wholly below the log
  start offset (DeleteRecords) whose epochs are all at or below the lineage's first epoch;
  else, if the segment lies within the lineage, one older than `retention.ms` or needed to
  bring local-only + remote bytes within `retention.bytes`. The scan stops at the first
  segment of the lineage that is kept, and at a segment being copied. The size breach is
  over what remains: a segment of the lineage deleted for the log start offset or for
  `retention.ms` counts as deleted, so a pass resumed after a crash between publishing the
  log start offset and deleting (the segments below it still there) deletes them and only
  what retention still asks for;
- segments whose epochs are all below the earliest epoch of the leader-epoch cache
  (unreferenced, e.g. left by an unclean leader election).

`RLMExpirationTask.run` publishes the new log start offset first, durably (the log's
`log_start_offset_listener`, the LogManager's checkpoint, runs before any delete: no reader,
in this process or after a restart, is sent to a segment being deleted; a checkpoint that
fails stops the pass before it deletes anything), then deletes each segment:
DELETE_SEGMENT_STARTED -> RSM delete -> DELETE_SEGMENT_FINISHED, dropping its RemoteIndexCache
entry. A failed delete is counted in
RemoteDeleteErrorsPerSec and stays DELETE_SEGMENT_STARTED for the next run to retry, which
does not record it again.

A failed run, and a failed deletion of a partition whose tiering was turned off, is retried
after the copy task's exponential backoff (engine.rlm.copier) and logged once per attempt:
a full or read-only tier fails every retry alike, and without the backoff it would log, and
record, at every interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.rlm.copier import CopiedPartition, gap_error
from engine.rlm.lineage import epochs_with_offsets, is_remote_segment_within_leader_epochs
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.remote.index_cache import RemoteIndexCache
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.remote.storage import RemoteStorageManager
    from engine.rlm.metrics import RLMMetrics
    from engine.rlm.pools import ExponentialBackoff

__all__ = ["ExpirationPlan", "RLMExpirationTask", "plan_expiration", "wait_for_tasks"]

log = logging.getLogger(__name__)
_S = RemoteLogSegmentState


@dataclass
class ExpirationPlan:
    """What one expiration run deletes, and the log start offset it publishes first."""

    to_delete: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    new_log_start_offset: int | None = None
    metadata_count: int = 0
    remote_size_bytes: int = 0
    size_computation_ms: float = 0.0
    reasons: dict = field(default_factory=dict)  # segment id -> why

    def add(self, md: RemoteLogSegmentMetadata, why: str) -> None:
        if md.remote_log_segment_id not in self.reasons:
            self.to_delete.append(md)
            self.reasons[md.remote_log_segment_id] = why


class _RetentionHandler:
    """Kafka's RemoteLogRetentionHandler: time, size and log-start-offset breaches."""

    def __init__(self, cleanup_until_ms: int | None, remaining_breached_size: int | None,
                 log_start_offset: int, first_epoch: int | None):
        self.cleanup_until_ms = cleanup_until_ms
        self.remaining = remaining_breached_size
        self.log_start_offset = log_start_offset
        self.first_epoch = first_epoch
        self.new_log_start_offset: int | None = None

    def _moved(self, md: RemoteLogSegmentMetadata) -> None:
        self.new_log_start_offset = max(self.new_log_start_offset or 0, md.end_offset + 1)

    def breach_by_log_start_offset(self, md: RemoteLogSegmentMetadata, counted: bool) -> bool:
        """`counted`: the segment's bytes are in the size the breach was computed from.
        Deleting it then shrinks the breach: the size breach is over what remains, else
        a restart after a crash between publishing the log start offset and deleting
        would delete these segments and `retention.bytes` worth more."""
        if self.first_epoch is None:
            return False
        hit = (all(e <= self.first_epoch for e in md.segment_leader_epochs)
               and md.end_offset < self.log_start_offset)
        if hit:
            self._moved(md)
            if counted and self.remaining is not None:
                self.remaining = max(0, self.remaining - md.segment_size_in_bytes)
        return hit

    def breach_by_time(self, md: RemoteLogSegmentMetadata) -> bool:
        if self.cleanup_until_ms is None or md.max_timestamp_ms > self.cleanup_until_ms:
            return False
        if self.remaining is not None:
            self.remaining = max(0, self.remaining - md.segment_size_in_bytes)
        self._moved(md)
        return True

    def breach_by_size(self, md: RemoteLogSegmentMetadata) -> bool:
        if not self.remaining:
            return False
        after = self.remaining - md.segment_size_in_bytes
        if after < 0:
            return False
        self.remaining = after
        self._moved(md)
        return True


def _by_epoch(segments) -> dict[int, list[RemoteLogSegmentMetadata]]:
    out: dict[int, list[RemoteLogSegmentMetadata]] = {}
    for md in segments:
        for epoch in md.segment_leader_epochs:
            out.setdefault(epoch, []).append(md)
    for mds in out.values():
        mds.sort(key=lambda m: m.start_offset)
    return out


def _remote_size_in_lineage(segments, lineage, log_end_offset) -> int:
    return sum(md.segment_size_in_bytes for md in segments
               if md.state == _S.COPY_SEGMENT_FINISHED
               and is_remote_segment_within_leader_epochs(md, log_end_offset, lineage))


def _is_orphan(st: PartitionState, md: RemoteLogSegmentMetadata, being_copied,
               started_ms: int) -> bool:
    """A COPY_SEGMENT_STARTED entry no copier will finish: started before this RLM (a crash)
    or abandoned by a copy of ours whose undo failed. Entries of copies started by this RLM
    are never taken for orphans, even if the listing is older than their FINISHED update."""
    if md.remote_log_segment_id in being_copied:
        return False
    return (md.event_timestamp_ms < started_ms
            or md.remote_log_segment_id in st.copy.abandoned_copy_ids)


def plan_expiration(st: PartitionState, segments: list[RemoteLogSegmentMetadata],
                    now_ms: int, started_ms: int = 0) -> ExpirationPlan:
    """The segments the expiration task deletes now (see the module notes); `started_ms` is
    when this RLM started (older COPY_SEGMENT_STARTED entries are orphans of a crash)."""
    plan = ExpirationPlan(metadata_count=len(segments),
                          remote_size_bytes=sum(m.segment_size_in_bytes for m in segments))
    if not segments:
        return plan
    unified = st.log
    being_copied = set(st.copy.segment_ids_being_copied)
    for md in segments:
        if md.state == _S.DELETE_SEGMENT_STARTED:
            plan.add(md, "an interrupted delete")
        elif md.state == _S.COPY_SEGMENT_STARTED and _is_orphan(st, md, being_copied,
                                                                 started_ms):
            plan.add(md, "an orphaned copy (COPY_SEGMENT_STARTED, not being copied)")
    entries = unified.leader_epoch_cache.entries
    lineage = epochs_with_offsets(entries)
    leo = unified.log_end_offset
    config = unified.config
    remaining = None
    # before the leader's initialisation the highest offset in remote storage is unknown
    # (-1): every local segment would count as local-only and retention.bytes look breached
    if config["retention.bytes"] > -1 and not st.needs_initialisation:
        started = time.perf_counter()
        remote_size = _remote_size_in_lineage(segments, lineage, leo)
        plan.size_computation_ms = (time.perf_counter() - started) * 1000
        highest = unified.highest_offset_in_remote_storage
        only_local = sum(s.size_in_bytes for s in unified.segments if s.base_offset >= highest)
        total = only_local + remote_size
        if total > config["retention.bytes"]:
            remaining = total - config["retention.bytes"]
    cleanup_until = now_ms - config["retention.ms"] if config["retention.ms"] > -1 else None
    handler = _RetentionHandler(cleanup_until, remaining, unified.log_start_offset,
                                next(iter(lineage), None))
    by_epoch = _by_epoch(segments)
    _scan_lineage(plan, handler, lineage, by_epoch, being_copied, leo)
    plan.new_log_start_offset = handler.new_log_start_offset
    # a cache starting after the log start offset lost its earlier entries (a missing or
    # truncated leader-epoch-checkpoint rebuilt from the local segments): older epochs are
    # not known to be unreferenced then
    if entries and entries[0].start_offset <= unified.log_start_offset:
        earliest = entries[0].epoch
        for md in segments:
            if md.state == _S.COPY_SEGMENT_FINISHED and all(
                    e < earliest for e in md.segment_leader_epochs):
                plan.add(md, f"unreferenced: every epoch below the earliest epoch {earliest}")
    return plan


def _scan_lineage(plan, handler, lineage, by_epoch, being_copied, leo) -> None:
    for epoch in lineage:
        for md in by_epoch.get(epoch, ()):
            if md.remote_log_segment_id in being_copied:
                return
            if md.state != _S.COPY_SEGMENT_FINISHED or md.remote_log_segment_id in plan.reasons:
                continue
            # a segment of the lineage counts in the size the breach was computed from
            valid = is_remote_segment_within_leader_epochs(md, leo, lineage)
            if handler.breach_by_log_start_offset(md, valid):
                plan.add(md, "below the log start offset")
            elif valid and handler.breach_by_time(md):
                plan.add(md, "retention.ms")
            elif valid and handler.breach_by_size(md):
                plan.add(md, "retention.bytes")
            elif valid:
                return  # the first segment of the lineage that is kept ends the scan


class RLMExpirationTask:
    """Runs the expiration task of the partitions it is given (see the module notes), and
    deletes remote data: one segment (shared with the copy task, which undoes a failed
    copy with it) or a whole partition.

    Args:
        rlmm, rsm: the plugins.
        index_cache: the RemoteIndexCache (a deleted segment's entry is dropped).
        metrics: the RemoteLogManager's metrics.
        clock: now in ms.
        backoff: the retry backoff of failed runs.
        broker_id: stamped on metadata events.
        started_ms: when the RemoteLogManager started (older COPY_SEGMENT_STARTED entries
            are orphans of a crash).
        initialise_leader: the copy task's initialisation of a leader's state
            (RLMCopier.initialise_leader), run when no copy run has done it yet.
    """

    def __init__(self, *, rlmm: RemoteLogMetadataManager, rsm: RemoteStorageManager,
                 index_cache: RemoteIndexCache, metrics: RLMMetrics, clock: Callable[[], int],
                 backoff: ExponentialBackoff, broker_id: int, started_ms: int,
                 initialise_leader: Callable[[PartitionState], None]):
        self.rlmm, self.rsm, self.index_cache = rlmm, rsm, index_cache
        self.metrics, self.clock, self.backoff = metrics, clock, backoff
        self.broker_id, self.started_ms = broker_id, started_ms
        self.initialise_leader = initialise_leader

    def run(self, st: PartitionState) -> tuple[int, list[Exception]]:
        """One run. Returns (segments deleted, errors of the deletes that failed)."""
        segments = list(self.rlmm.list_remote_log_segments(st.tip))
        plan = plan_expiration(st, segments, self.clock(), self.started_ms)
        metrics = self.metrics
        metrics.set_gauge("RemoteLogMetadataCount", st.topic, st.partition,
                          plan.metadata_count)
        metrics.set_gauge("RemoteLogSizeBytes", st.topic, st.partition, plan.remote_size_bytes)
        metrics.set_gauge("RemoteLogSizeComputationTime", st.topic, st.partition,
                          plan.size_computation_ms)
        st.remote_segment_count = plan.metadata_count
        st.remote_size_bytes = plan.remote_size_bytes
        moved = plan.new_log_start_offset is not None and \
            st.log.maybe_increment_log_start_offset(plan.new_log_start_offset,
                                                    "SegmentDeletion")
        if moved and st.log.log_start_offset_listener is not None:
            st.log.log_start_offset_listener(st.log)
        pending = list(plan.to_delete)
        lag_bytes = sum(m.segment_size_in_bytes for m in pending)
        deleted, errors = 0, []
        for md in plan.to_delete:
            metrics.set_gauge("RemoteDeleteLagSegments", st.topic, st.partition, len(pending))
            metrics.set_gauge("RemoteDeleteLagBytes", st.topic, st.partition, lag_bytes)
            try:
                self.delete_remote_segment(st, md, md.custom_metadata)
            except Exception as exc:
                errors.append(exc)
                # the run's failures are logged once, by expire_once (a full or read-only
                # tier fails every delete alike)
                log.debug("Deleting remote segment %s (offsets [%d, %d]) of %s failed; the "
                          "next run retries: %s", md.remote_log_segment_id.id,
                          md.start_offset, md.end_offset, st.name, exc)
                continue
            log.info("Deleted remote segment %s (offsets [%d, %d]) of %s: %s",
                     md.remote_log_segment_id.id, md.start_offset, md.end_offset, st.name,
                     plan.reasons[md.remote_log_segment_id])
            deleted += 1
            pending.remove(md)
            lag_bytes -= md.segment_size_in_bytes
            st.remote_segment_count -= 1
            st.remote_size_bytes -= md.segment_size_in_bytes
        metrics.set_gauge("RemoteDeleteLagSegments", st.topic, st.partition, len(pending))
        metrics.set_gauge("RemoteDeleteLagBytes", st.topic, st.partition, lag_bytes)
        metrics.set_gauge("RemoteLogMetadataCount", st.topic, st.partition,
                          st.remote_segment_count)
        metrics.set_gauge("RemoteLogSizeBytes", st.topic, st.partition, st.remote_size_bytes)
        return deleted, errors

    def expire_once(self, st: PartitionState,
                    honour_backoff: bool = False) -> tuple[int, list[Exception]]:
        """One expiration run. A run with errors is retried after the copy's exponential
        backoff (each retry of a failing tier would otherwise log and record again at every
        interval), and logged once for all its failed deletes."""
        if honour_backoff and self.clock() < st.next_expiration_attempt_ms:
            return 0, []
        deleted, errors = self._expire_run(st)
        if not errors:
            st.expiration_failures, st.next_expiration_attempt_ms = 0, 0
            return deleted, errors
        delay = self.backoff.backoff(st.expiration_failures)
        st.expiration_failures += 1
        st.next_expiration_attempt_ms = self.clock() + delay
        log.warning("Expiration task of %s failed (attempt %d; retry in %d ms): %d error(s), "
                    "deleted %d segment(s); last: %s", st.name, st.expiration_failures, delay,
                    len(errors), deleted, st.last_expiration_error)
        return deleted, errors

    def _expire_run(self, st: PartitionState) -> tuple[int, list[Exception]]:
        if st.needs_initialisation and st.copy_lock.acquire(blocking=False):
            # a running copy initialises the state itself; till then size retention waits
            try:
                if st.needs_initialisation:
                    self.initialise_leader(st)
            except Exception as exc:
                st.copy_lock.release()
                st.last_expiration_error = f"{type(exc).__name__}: {exc}"
                return 0, [exc]
            st.copy_lock.release()
        if st.copy.metadata_gap is not None:  # nothing is expired over a gap in the metadata
            gap = gap_error(st)
            st.last_expiration_error = f"{type(gap).__name__}: {gap}"
            return 0, [gap]
        try:
            deleted, errors = self.run(st)
        except Exception as exc:
            deleted, errors = 0, [exc]
        st.last_expiration_error = (f"{type(errors[-1]).__name__}: {errors[-1]}"
                                    if errors else None)
        return deleted, errors

    # -- remote deletion -------------------------------------------------------------------

    def mark_delete_started(self, md: RemoteLogSegmentMetadata,
                            custom: bytes | None) -> RemoteLogSegmentMetadata:
        update = RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, self.clock(), custom,
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED, self.broker_id)
        self.rlmm.update_remote_log_segment_metadata(update)
        return md.create_with_updates(update)

    def mark_delete_finished(self, md: RemoteLogSegmentMetadata) -> None:
        self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            md.remote_log_segment_id, self.clock(), md.custom_metadata,
            RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, self.broker_id))

    def delete_remote_segment(self, st: CopiedPartition, md: RemoteLogSegmentMetadata,
                              custom: bytes | None) -> None:
        """DELETE_SEGMENT_STARTED -> RSM delete -> index cache entry dropped ->
        DELETE_SEGMENT_FINISHED. A failed RSM delete is counted and re-raised; the segment
        stays DELETE_SEGMENT_STARTED. A segment already DELETE_SEGMENT_STARTED (a retry) is
        not marked again: retries of a failing tier add nothing to the metadata."""
        if md.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            started = md
        else:
            started = self.mark_delete_started(md, custom)
        self.metrics.mark("RemoteDeleteRequestsPerSec", st.topic)
        try:
            self.rsm.delete_log_segment_data(started)
        except Exception:
            self.metrics.mark("RemoteDeleteErrorsPerSec", st.topic)
            raise
        self.index_cache.remove(md.remote_log_segment_id.id)
        self.mark_delete_finished(started)

    def _put_partition_state(self, tip: TopicIdPartition,
                             state: RemotePartitionDeleteState) -> None:
        try:
            self.rlmm.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(tip, state, self.clock(), self.broker_id))
        except IllegalStateTransitionError:  # a retry of a deletion that got further before
            log.info("Partition %s already past %s", tip, state.name)

    def delete_remote_partition(self, tip: TopicIdPartition) -> int:
        """Kafka's stopPartitions with deleteRemoteLog: DELETE_PARTITION_MARKED -> STARTED ->
        every segment DELETE_SEGMENT_STARTED -> RSM deletes -> index cache entries dropped ->
        DELETE_SEGMENT_FINISHED -> DELETE_PARTITION_FINISHED. Returns the segments deleted;
        raises the first RSM error (the partition stays STARTED; calling again resumes)."""
        self._put_partition_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
        self._put_partition_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_STARTED)
        segments = list(self.rlmm.list_remote_log_segments(tip))
        updates = []
        for md in segments:  # a retry does not mark a segment DELETE_SEGMENT_STARTED again
            updates.append(md if md.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
                           else self.mark_delete_started(md, md.custom_metadata))
        for md in updates:
            self.metrics.mark("RemoteDeleteRequestsPerSec", tip.topic)
            try:
                self.rsm.delete_log_segment_data(md)
            except Exception:
                self.metrics.mark("RemoteDeleteErrorsPerSec", tip.topic)
                raise
        for md in updates:
            self.index_cache.remove(md.remote_log_segment_id.id)
        for md in updates:
            self.mark_delete_finished(md)
        self._put_partition_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED)
        return len(updates)

    def delete_disabled(self, pending: list[PartitionState], wait_s: float
                        ) -> tuple[list[str], list[PartitionState]]:
        """Deletes the remote data of the partitions whose tiering was disabled with
        remote.log.delete.on.disable: the log start offset moves to the local log start
        first (no reader is sent to the tier), then the partition deletion runs
        (DELETE_PARTITION_MARKED -> STARTED -> FINISHED). Returns the errors and the
        partitions whose deletion failed: a later pass retries them, after the retry
        backoff."""
        errors, retry = [], []
        for st in pending:
            if self.clock() < st.next_expiration_attempt_ms:  # waiting out the backoff
                retry.append(st)
                errors.append(f"{st.name}: delete on disable: {st.last_expiration_error}")
                continue
            try:
                wait_for_tasks(st, wait_s)
                unified = st.log
                if unified.local_log_start_offset > unified.log_start_offset:
                    unified.maybe_increment_log_start_offset(unified.local_log_start_offset,
                                                             "SegmentDeletion")
                deleted = self.delete_remote_partition(st.tip)
                self.rlmm.on_stop_partitions([st.tip])
                log.info("%s: tiering disabled: %d remote segment(s) deleted", st.name,
                         deleted)
            except Exception as exc:
                retry.append(st)
                st.last_expiration_error = f"{type(exc).__name__}: {exc}"
                delay = self.backoff.backoff(st.expiration_failures)
                st.expiration_failures += 1
                st.next_expiration_attempt_ms = self.clock() + delay
                errors.append(f"{st.name}: delete on disable: {st.last_expiration_error}")
                log.warning("Deleting the remote data of %s (tiering disabled) failed "
                            "(attempt %d; retry in %d ms): %s", st.name,
                            st.expiration_failures, delay, exc)
        return errors, retry


def wait_for_tasks(st: PartitionState, wait_s: float) -> None:
    """Waits (bounded) for the partition's running copy and expiration runs: a running
    copy sees deleted_partition and stops after its current segment; one stuck in the
    RSM is not waited for."""
    for lock, what in ((st.copy_lock, "copy"), (st.expiration_lock, "expiration")):
        if lock.acquire(timeout=wait_s):
            lock.release()
        else:
            log.warning("Deleting the remote data of %s while its %s run is still in "
                        "progress", st.name, what)
