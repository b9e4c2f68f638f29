"""The RemoteLogManager's registry of the partitions it serves.

Which partitions are tiered here and in what role: `sync` adds the tiered partitions of the
LogManager not known yet (as leaders: the engine is a single broker) and forgets those whose
log went away; `set_roles` makes partitions leaders (with their epochs) or followers, as
`RemoteLogManager.on_leadership_change` asks. A topic whose `remote.storage.enable` is
turned off stops tiering (`_stop_tiering`), and with `remote.log.delete.on.disable=true` the
next pass moves the log start offset to the local one and deletes its remote data
(`delete_disabled`, Kafka's stopPartitions with deleteRemoteLog), retried after the
expiration's backoff until it succeeds; `delete_partition` deletes one partition's remote
data (and local log). A partition whose remote deletion began is never tiered again under
that topic id; one whose remote log metadata cannot be read now is left out of the passes
until it can. A partition's topic id is the LogManager's (`LogManager.topic_id`: from its
`partition.metadata`, written when it has none, as Kafka always has one).

The `RemoteLogManager` holds one `PartitionRegistry`, built with the lock they share and
the callables it may use of the manager: scheduling and cancelling a partition's tasks, and
the remote deletions (engine.rlm.expiration) run with the manager's plugins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from engine.common import TopicPartition, Uuid
from engine.errors import CorruptRemoteLogMetadataError, UnknownTopicOrPartitionError
from engine.remote.metadata import TopicIdPartition
from engine.rlm import expiration, state
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.log.log_manager import LogManager
    from engine.log.unified_log import UnifiedLog
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.rlm.metrics import RLMMetrics

__all__ = ["TASK_WAIT_S", "PartitionRegistry"]

# the log records of every part of the RemoteLogManager keep its logger name
log = logging.getLogger("engine.rlm.manager")

#: how long a deletion waits for the partition's running copy or expiration run
TASK_WAIT_S = 30.0


class PartitionRegistry:
    """The partitions a RemoteLogManager serves (see the module notes).

    Args:
        log_manager: the local logs.
        rlmm: the RLMM (deletion states, leadership notices, partition errors).
        metrics: the manager's metrics (a forgotten partition's series are removed).
        lock: the manager's lock; it guards every map below.
        schedule, cancel: schedule a partition's tasks / cancel them (no-ops until the
            manager's scheduler runs).
        delete_disabled: deletes the remote data of partitions whose tiering was turned
            off; returns (errors, the states to retry).
        delete_remote_partition: deletes one partition's remote data; returns the segments
            deleted.
    """

    def __init__(self, *, log_manager: LogManager, rlmm: RemoteLogMetadataManager,
                 metrics: RLMMetrics, lock: threading.RLock,
                 schedule: Callable[[PartitionState], None],
                 cancel: Callable[[PartitionState], None],
                 delete_disabled: Callable[[list[PartitionState]],
                                           tuple[list[str], list[PartitionState]]],
                 delete_remote_partition: Callable[[TopicIdPartition], int]):
        self.log_manager, self.rlmm, self.metrics = log_manager, rlmm, metrics
        self._lock = lock
        self._schedule, self._cancel = schedule, cancel
        self._delete_disabled_data = delete_disabled
        self._delete_remote_partition = delete_remote_partition
        self.partitions: dict[TopicPartition, PartitionState] = {}
        #: partitions whose remote deletion began here (it may have failed): never tiered
        #: again (-> the deleted topic id)
        self.deleting: dict[TopicPartition, Uuid] = {}
        #: partitions whose tiering was turned off with remote.log.delete.on.disable=true:
        #: their remote data is deleted by the next pass (retried until it succeeds)
        self.disabled: list[PartitionState] = []
        #: tiered partitions left out of the passes: their remote log metadata cannot be
        #: read now (-> why)
        self.unreadable: dict[TopicPartition, str] = {}

    def _partition_list(self) -> list[TopicPartition]:
        parts = self.log_manager.partitions
        return list(parts() if callable(parts) else parts)

    def sync(self) -> list[PartitionState]:
        """Adds the tiered partitions not known yet as leaders (single engine); forgets
        those whose log went away. Returns the states, sorted."""
        added = []
        with self._lock:
            present = set()
            for tp in self._partition_list():
                present.add(tp)
                known = self.partitions.get(tp)
                if known is not None:
                    if not known.log.remote_log_enabled:
                        self._stop_tiering(tp, known)
                    continue
                unified = self.log_manager.get_log(tp[0], tp[1])
                if unified is None or not unified.remote_log_enabled or \
                        self.is_deleting(tp, unified):
                    continue
                st = state.new_state(tp, unified, None, True,
                                     self.log_manager.topic_id(tp.topic))
                try:
                    deletion_recorded = self._remote_deletion_recorded(st.tip)
                except CorruptRemoteLogMetadataError as exc:
                    # offline for good (until restarted): known, reported, never tiered
                    deletion_recorded, st.offline_error = False, exc
                except OSError as exc:
                    # its metadata cannot be read now: whether its deletion began is
                    # unknown, so it is left out until a later pass (partition_error logs
                    # why, once; run_once reports it)
                    self.rlmm.partition_error(st.tip)
                    self.unreadable[tp] = f"{type(exc).__name__}: {exc}"
                    continue
                self.unreadable.pop(tp, None)
                if deletion_recorded:
                    self.deleting[tp] = st.tip.topic_id
                    log.warning("%s: its remote data is being deleted "
                                "(DELETE_PARTITION_MARKED or later): it is not tiered; "
                                "delete_partition resumes the deletion", st.name)
                    continue
                self.partitions[tp] = st
                added.append(st)
            for tp in [t for t in self.partitions if t not in present]:
                self.forget(tp)
            for tp in [t for t in self.unreadable if t not in present]:
                del self.unreadable[tp]
            states = [self.partitions[tp] for tp in sorted(self.partitions)]
        if added:
            self.rlmm.on_partition_leadership_changes([st.tip for st in added], [])
            for st in added:
                self._schedule(st)
        return states

    def change_leadership(self, leaders: Mapping[tuple[str, int], int | None],
                          followers: Mapping[tuple[str, int], int | None]) -> None:
        """Makes `leaders` and `followers` ((topic, partition) -> leader epoch) so, tells
        the RLMM, and schedules the tasks of each partition whose state was created."""
        with self._lock:
            lead = self.set_roles(leaders, True)
            follow = self.set_roles(followers, False)
        self.rlmm.on_partition_leadership_changes([s.tip for s in lead],
                                                  [s.tip for s in follow])
        for st in lead + follow:
            self._schedule(st)

    def set_roles(self, roles: Mapping[tuple[str, int], int | None], is_leader: bool
                  ) -> list[PartitionState]:
        """Makes the tiered partitions of `roles` ((topic, partition) -> leader epoch, None:
        the latest) leaders or followers; returns the states created (a partition already
        in that role and epoch keeps its state). Call under the lock."""
        created = []
        for (topic, partition), epoch in roles.items():
            tp = TopicPartition(topic, int(partition))
            unified = self.log_manager.get_log(topic, partition)
            if unified is None:
                raise UnknownTopicOrPartitionError.no_log(topic, partition)
            if not unified.remote_log_enabled or self.is_deleting(tp, unified):
                continue
            old = self.partitions.get(tp)
            if old is not None and old.is_leader == is_leader and \
                    (epoch is None or old.leader_epoch == epoch):
                continue
            if old is not None:
                self.forget(tp)
            st = state.new_state(tp, unified, epoch, is_leader,
                                 self.log_manager.topic_id(topic))
            if old is not None:
                # the old state's copy may still be running (it stops after its current
                # segment): sharing its locks makes the new runs wait for it, and then find
                # its segment copied instead of uploading it again; its in-flight and
                # abandoned copies stay known
                st.copy_lock, st.expiration_lock = old.copy_lock, old.expiration_lock
                st.copy.carry_over(old.copy)
            self.partitions[tp] = st
            created.append(st)
        return created

    def _stop_tiering(self, tp: TopicPartition, st: PartitionState) -> None:
        """remote.storage.enable turned off on the partition's topic (call under _lock):
        its tasks stop; with remote.log.delete.on.disable the remote data is deleted by the
        next pass (Kafka's stopPartitions with deleteRemoteLog), else it is left."""
        self.forget(tp)
        if st.log.config["remote.log.delete.on.disable"]:
            self.deleting[tp] = st.tip.topic_id
            self.disabled.append(st)
            log.info("%s: tiering disabled with remote.log.delete.on.disable: its remote data "
                     "is deleted", st.name)
        else:
            log.info("%s: tiering disabled: its remote data is left in place", st.name)

    def delete_disabled(self) -> list[str]:
        """Deletes the remote data of the partitions whose tiering was disabled with
        remote.log.delete.on.disable (engine.rlm.expiration.delete_disabled); the failed
        ones wait for a later pass. Returns the errors."""
        with self._lock:
            pending, self.disabled = self.disabled, []
        errors, retry = self._delete_disabled_data(pending)
        if retry:
            with self._lock:
                self.disabled.extend(retry)
        return errors

    def log_and_state(self, topic: str, partition: int
                      ) -> tuple[UnifiedLog, PartitionState | None]:
        """The partition's log and its state (None when it is not tiered here); a tiered
        partition not known yet is added by a pass first. UnknownTopicOrPartitionError when
        there is no such log."""
        unified = self.log_manager.get_log(topic, partition)
        if unified is None:
            raise UnknownTopicOrPartitionError.no_log(topic, partition)
        st = self.partitions.get(TopicPartition(topic, int(partition)))
        if st is None and unified.remote_log_enabled:
            st = next((s for s in self.sync()
                       if (s.topic, s.partition) == (topic, int(partition))), None)
        return unified, st

    def offline_count(self) -> int:
        """Partitions whose remote log metadata the RLMM cannot serve."""
        return sum(st.offline_error is not None for st in list(self.partitions.values()))

    def run_once(self, clock: Callable[[], int]) -> tuple[list[str], int]:
        """The registry's part of `RemoteLogManager.run_once`: deletes the remote data of
        the partitions whose tiering was turned off (`delete_disabled`). Returns the pass's
        errors (those deletions', and one per partition left out as unreadable) and the ms
        until the failed deletions may be retried (0 when none failed)."""
        errors = self.delete_disabled()
        with self._lock:
            errors += [f"{t}-{p}: left out: its remote log metadata cannot be read: {why}"
                       for (t, p), why in sorted(self.unreadable.items())]
            disabled = list(self.disabled)
        retry_in_ms = 0
        for st in disabled:
            retry_in_ms = max(retry_in_ms, st.next_expiration_attempt_ms - clock())
        return errors, retry_in_ms

    def is_deleting(self, tp: TopicPartition, unified) -> bool:
        topic_id = self.deleting.get(tp)
        if topic_id is None:
            return False
        metadata = unified.partition_metadata  # a topic created again has a new id
        return metadata.exists() and metadata.read().topic_id == topic_id

    def _remote_deletion_recorded(self, tip: TopicIdPartition) -> bool:
        return self.rlmm.partition_delete_state(tip) is not None

    def forget(self, tp: TopicPartition) -> None:
        st = self.partitions.pop(tp, None)
        if st is None:
            return
        st.deleted_partition = True
        self._cancel(st)
        self.metrics.remove_partition(st.topic, st.partition)

    def delete_partition(self, topic: str, partition: int, *, delete_local: bool = True) -> int:
        """Deletes the partition's remote data (DELETE_PARTITION_MARKED -> STARTED -> every
        segment deleted -> FINISHED) and, with `delete_local`, its local log
        (LogManager.delete_partition). Returns the remote segments deleted. Calling again
        after a failure resumes."""
        tp = TopicPartition(topic, int(partition))
        with self._lock:
            st = self.partitions.get(tp)
            self.forget(tp)
            # kept even after a failure: tiering must not add segments to a partition whose
            # deletion is under way (calling again resumes it)
            if st is not None:
                self.deleting[tp] = st.tip.topic_id
        if st is not None:
            tip = st.tip
            expiration.wait_for_tasks(st, TASK_WAIT_S)
        else:
            tip = self._find_tip(topic, int(partition))
            with self._lock:
                self.deleting[tp] = tip.topic_id
        deleted = self._delete_remote_partition(tip)
        self.rlmm.on_stop_partitions([tip])
        if delete_local and self.log_manager.get_log(topic, partition) is not None:
            self.log_manager.delete_partition(topic, partition)
        log.info("Deleted partition %s: %d remote segment(s)", tip, deleted)
        return deleted

    def _find_tip(self, topic: str, partition: int) -> TopicIdPartition:
        unified = self.log_manager.get_log(topic, partition)
        if unified is not None and unified.partition_metadata.exists():
            return TopicIdPartition(unified.partition_metadata.read().topic_id, topic, partition)
        for tip in self.rlmm.list_partitions():
            if (tip.topic, tip.partition) == (topic, partition):
                return tip
        raise UnknownTopicOrPartitionError.no_log(
            topic, partition, " with a topic id, and no remote metadata")
