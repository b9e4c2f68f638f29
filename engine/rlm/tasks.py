"""One partition's runs of the RemoteLogManager's tasks (Kafka's RLMTask: the copy,
expiration and follower tasks), as the scheduler runs them and as `run_once` runs them on
the calling thread.

After each copy or follower run the log's own retention runs (`UnifiedLog.delete_old_segments`,
which deletes a tiered segment locally only once its copy is FINISHED): the engine has no
separate log-cleanup scheduler. A partition whose remote log metadata the RLMM cannot serve
(`partition_error`, e.g. a damaged metadata log) is offline and fails alone: none of its
tasks runs, its reads and ListOffsets raise that error (`check_online`), `status()` shows it
offline with the error, the `RemoteLogOfflinePartitionsCount` gauge counts it and `run_once`
reports it among the errors; every other partition is tiered, expired and read as usual. One
whose metadata is not ready yet waits. `run_once` waits up to 30 s for a run of the same
task still going on the scheduler (e.g. a hung copy), then reports it in the summary.

The RemoteLogManager builds one `RLMTasks` with the tasks it composes (RLMCopier,
RLMExpirationTask, RLMFollowerTask) and the collaborators it names.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.rlm.copier import candidate_segments
from engine.rlm.expiration import plan_expiration
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.rlm.copier import RLMCopier
    from engine.rlm.expiration import RLMExpirationTask
    from engine.rlm.follower import RLMFollowerTask
    from engine.rlm.metrics import RLMMetrics

__all__ = ["RLMTasks", "RunSummary"]

# the log records of every part of the RemoteLogManager keep its logger name
log = logging.getLogger("engine.rlm.manager")

#: how long run_once waits for a scheduled run of the same task to end
_RUN_ONCE_LOCK_WAIT_S = 30.0


@dataclass
class RunSummary:
    """What one `run_once` pass did."""

    copied_segments: int = 0
    copied_bytes: int = 0
    deleted_remote_segments: int = 0
    deleted_local_segments: int = 0
    errors: list[str] = field(default_factory=list)
    #: ms until every task that failed in this pass may run again (its retry backoff)
    retry_in_ms: int = 0

    @property
    def made_progress(self) -> bool:
        return bool(self.copied_segments or self.deleted_remote_segments
                    or self.deleted_local_segments)


class RLMTasks:
    """Runs the tasks of the partitions it is given (see the module notes).

    Args:
        rlmm: the RLMM (whether a partition is offline or ready; the expiration plan).
        copier, expiration, follower: the copy, expiration and follower tasks.
        metrics: the RemoteLogManager's metrics (LocalRetentionErrorsPerSec).
        clock: now in ms.
        started_ms: when the RemoteLogManager started (the expiration plan's orphans).
        interval_ms: `remote.log.manager.task.interval.ms`, the delay between runs.
    """

    def __init__(self, *, rlmm: RemoteLogMetadataManager, copier: RLMCopier,
                 expiration: RLMExpirationTask, follower: RLMFollowerTask, metrics: RLMMetrics,
                 clock: Callable[[], int], started_ms: int, interval_ms: int):
        self.rlmm, self.copier = rlmm, copier
        self.expiration, self.follower = expiration, follower
        self.metrics, self.clock = metrics, clock
        self.started_ms, self.interval_ms = started_ms, interval_ms

    def offline(self, st: PartitionState) -> Exception | None:
        """The partition's RLMM error (it is offline) or None; kept in st.offline_error for
        status and the offline gauge."""
        error = self.rlmm.partition_error(st.tip)
        if error is not None and st.offline_error is None:
            log.error("%s is offline: its remote log metadata cannot be served (the other "
                      "partitions go on): %s", st.name, error)
        st.offline_error = error
        return error

    def check_online(self, st: PartitionState) -> None:
        """Raises the error of an offline partition (a copy: a fresh traceback)."""
        error = self.offline(st)
        if error is not None:
            raise copy.copy(error)

    def ready(self, st: PartitionState) -> bool:
        return self.offline(st) is None and self.rlmm.is_ready(st.tip)

    def ensure_initialised(self, st: PartitionState) -> bool:
        """Initialises a leader's state unless done; False when a copy run held the copy
        lock for the whole wait (that run initialises it)."""
        if not st.needs_initialisation or not st.is_leader:
            return True
        if not st.copy_lock.acquire(timeout=_RUN_ONCE_LOCK_WAIT_S):
            return False
        try:
            if st.needs_initialisation:
                self.copier.initialise_leader(st)
        finally:
            st.copy_lock.release()
        return True

    def initialise(self, states: list[PartitionState], topic: str | None = None,
                   partition: int | None = None) -> None:
        """`ensure_initialised` for each of `states` (or those of `topic`/`partition`); an
        offline one is skipped unless `topic` and `partition` name it (then it raises)."""
        named = topic is not None and partition is not None
        for st in states:
            if topic is not None and st.topic != topic:
                continue
            if partition is not None and st.partition != int(partition):
                continue
            if named:
                self.check_online(st)
            elif self.offline(st) is not None:
                continue
            self.ensure_initialised(st)

    def refresh_for_status(self, st: PartitionState) -> None:
        """Brings an online partition's state up to date for its status, as `status()`
        does in any process: initialised (a failure is kept as its last copy error) and,
        for a leader, its next segment checked (a damaged one shows)."""
        if self.offline(st) is not None:
            return  # shown offline, with its error
        try:
            self.ensure_initialised(st)
        except Exception as exc:
            st.copy.last_copy_error = f"{type(exc).__name__}: {exc}"
            log.warning("Initialising %s for its status failed: %s", st.name, exc)
        if st.is_leader:
            self.copier.check_next_segment(st)

    def delete_local(self, st: PartitionState) -> int:
        """The log's local retention; a failure is recorded, logged and counted."""
        try:
            deleted = st.log.delete_old_segments()
        except Exception as exc:  # the next run retries; status and the meter show it meanwhile
            st.last_local_retention_error = f"{type(exc).__name__}: {exc}"
            self.metrics.mark("LocalRetentionErrorsPerSec", st.topic)
            log.warning("Local retention of %s failed: %s", st.name, exc)
            return 0
        st.last_local_retention_error = None
        return deleted

    # -- scheduled runs: each returns the delay until its next run, in ms ------------------

    def scheduled_copy(self, st: PartitionState) -> int:
        if not self.ready(st):
            return self.interval_ms
        with st.copy_lock:
            delay, _, _ = self.copier.copy_once(st, honour_backoff=False)
        self.delete_local(st)
        return delay

    def scheduled_expiration(self, st: PartitionState) -> int:
        if self.ready(st):
            with st.expiration_lock:
                self.expiration.expire_once(st)
            if st.expiration_failures:
                return max(0, st.next_expiration_attempt_ms - self.clock())
        return self.interval_ms

    def scheduled_follower(self, st: PartitionState) -> int:
        if self.ready(st):
            self.follower.run(st)
            self.delete_local(st)
        return self.interval_ms

    # -- run_once --------------------------------------------------------------------------

    def run_once(self, st: PartitionState, summary: RunSummary) -> None:
        """The partition's tasks once on this thread, what they did in `summary`: copy
        (honouring a pending retry backoff), local retention and expiration for a leader;
        the follower task and local retention for a follower."""
        offline = self.offline(st)
        if offline is not None:
            summary.errors.append(f"{st.name}: offline: {type(offline).__name__}: {offline}")
            return
        if not self.rlmm.is_ready(st.tip):
            summary.errors.append(f"{st.name}: remote log metadata not ready")
            return
        if st.is_leader:
            self._run_leader_once(st, summary)
        else:
            self.follower.run(st)
            self._retain_locally(st, summary)

    def _run_leader_once(self, st: PartitionState, summary: RunSummary) -> None:
        """run_once's tasks of a leader partition: copy, local retention, expiration."""
        if st.copy_lock.acquire(timeout=_RUN_ONCE_LOCK_WAIT_S):
            try:
                _, copied, nbytes = self.copier.copy_once(st, honour_backoff=True)
            finally:
                st.copy_lock.release()
            summary.copied_segments += copied
            summary.copied_bytes += nbytes
            if st.copy.last_copy_error and st.copy.copy_failures:
                summary.errors.append(f"{st.name}: copy: {st.copy.last_copy_error}")
        else:
            summary.errors.append(f"{st.name}: copy: a copy run is still in progress")
        self._retain_locally(st, summary)
        if st.expiration_lock.acquire(timeout=_RUN_ONCE_LOCK_WAIT_S):
            try:
                deleted, errors = self.expiration.expire_once(st, honour_backoff=True)
            finally:
                st.expiration_lock.release()
            summary.deleted_remote_segments += deleted
            summary.errors += [f"{st.name}: expiration: {type(e).__name__}: {e}"
                               for e in errors]
            if not errors and st.expiration_failures and st.last_expiration_error:
                # waiting out the retry backoff of a failed run
                summary.errors.append(f"{st.name}: expiration: {st.last_expiration_error}")
        now = self.clock()
        for failures, next_ms in ((st.copy.copy_failures, st.copy.next_copy_attempt_ms),
                                  (st.expiration_failures, st.next_expiration_attempt_ms)):
            if failures:
                summary.retry_in_ms = max(summary.retry_in_ms, next_ms - now)

    def _retain_locally(self, st: PartitionState, summary: RunSummary) -> None:
        """run_once's local retention of a partition, a failure in the summary's errors."""
        summary.deleted_local_segments += self.delete_local(st)
        if st.last_local_retention_error:
            summary.errors.append(f"{st.name}: local retention: "
                                  f"{st.last_local_retention_error}")

    def is_idle(self, st: PartitionState) -> bool:
        """True when the partition has no segment left to copy, no copy in progress and no
        remote segment to delete (a copy that keeps failing is not idle); a follower or an
        offline partition has no work it can do."""
        if not st.is_leader or self.offline(st) is not None:
            return True
        if st.copy.copy_in_progress is not None:
            return False
        if not (st.copy.copy_cancelled or st.log.remote_log_copy_disabled
                or st.copy.corrupt_segment):  # stopped until an operator acts
            if not self.ensure_initialised(st):
                return False
            if st.copy.metadata_gap is not None:
                return True  # refused until an operator acts: nothing to wait for
            lso = st.log.last_stable_offset
            if candidate_segments(st.log, st.copy.copied_offset, lso):
                return False
        if st.copy.metadata_gap is not None:
            return True
        segments = list(self.rlmm.list_remote_log_segments(st.tip))
        return not plan_expiration(st, segments, self.clock(), self.started_ms).to_delete
