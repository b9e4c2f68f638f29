"""The RemoteLogManager's registry of the partitions it serves (a part of `RemoteLogManager`).

Which partitions are tiered here and in what role: `_sync_partitions` adds the tiered
partitions of the LogManager not known yet (as leaders: the engine is a single broker) and
forgets those whose log went away; a topic whose `remote.storage.enable` is turned off stops
tiering (`_stop_tiering`), and with `remote.log.delete.on.disable=true` its remote data is
deleted by the next pass (`_delete_disabled`, Kafka's stopPartitions with deleteRemoteLog);
`delete_partition` deletes one partition's remote data (and local log). A partition whose
remote deletion began is never tiered again under that topic id; one whose remote log
metadata cannot be read now is left out of the passes until it can.

`PartitionRegistry` holds no state of its own: `RemoteLogManager.__init__` creates the maps
below, and `_lock` guards them.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from engine.common import TopicPartition, Uuid
from engine.errors import CorruptRemoteLogMetadataError, UnknownTopicOrPartitionError
from engine.remote.metadata import TopicIdPartition
from engine.rlm import expiration, state
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.log.log_manager import LogManager
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.rlm.metrics import RLMMetrics
    from engine.rlm.pools import TaskScheduler

__all__ = ["PartitionRegistry"]

# the log records of every part of the RemoteLogManager keep its logger name
log = logging.getLogger("engine.rlm.manager")

#: how long a deletion waits for the partition's running copy or expiration run
_TASK_WAIT_S = 30.0


class PartitionRegistry:
    """The partitions a RemoteLogManager serves; mixed into `RemoteLogManager`."""

    _lock: threading.RLock
    _partitions: dict[TopicPartition, PartitionState]
    _explicit_roles: set[TopicPartition]
    _deleting: dict[TopicPartition, Uuid]
    _disabled: list[PartitionState]
    _unreadable: dict[TopicPartition, str]
    _scheduler: TaskScheduler | None
    log_manager: LogManager
    rlmm: RemoteLogMetadataManager
    metrics: RLMMetrics

    def _partition_list(self) -> list[TopicPartition]:
        parts = self.log_manager.partitions
        return list(parts() if callable(parts) else parts)

    def _sync_partitions(self) -> list[PartitionState]:
        """Adds the tiered partitions not known yet as leaders (single engine); forgets
        those whose log went away. Returns the states, sorted."""
        added = []
        with self._lock:
            present = set()
            for tp in self._partition_list():
                present.add(tp)
                known = self._partitions.get(tp)
                if known is not None:
                    if not known.log.remote_log_enabled:
                        self._stop_tiering(tp, known)
                    continue
                unified = self.log_manager.get_log(tp[0], tp[1])
                if unified is None or not unified.remote_log_enabled or \
                        self._is_deleting(tp, unified):
                    continue
                st = state.new_state(tp, unified, None, True)
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
                    self._unreadable[tp] = f"{type(exc).__name__}: {exc}"
                    continue
                self._unreadable.pop(tp, None)
                if deletion_recorded:
                    self._deleting[tp] = st.tip.topic_id
                    log.warning("%s: its remote data is being deleted "
                                "(DELETE_PARTITION_MARKED or later): it is not tiered; "
                                "delete_partition resumes the deletion", st.name)
                    continue
                self._partitions[tp] = st
                added.append(st)
            for tp in [t for t in self._partitions if t not in present]:
                self._forget(tp)
            for tp in [t for t in self._unreadable if t not in present]:
                del self._unreadable[tp]
            states = [self._partitions[tp] for tp in sorted(self._partitions)]
        if added:
            self.rlmm.on_partition_leadership_changes([st.tip for st in added], [])
            if self._scheduler is not None:
                for st in added:
                    self._schedule(st)
        return states

    def _stop_tiering(self, tp: TopicPartition, st: PartitionState) -> None:
        """remote.storage.enable turned off on the partition's topic (call under _lock):
        its tasks stop; with remote.log.delete.on.disable the remote data is deleted by the
        next pass (Kafka's stopPartitions with deleteRemoteLog), else it is left."""
        self._forget(tp)
        self._explicit_roles.discard(tp)
        if st.log.config["remote.log.delete.on.disable"]:
            self._deleting[tp] = st.tip.topic_id
            self._disabled.append(st)
            log.info("%s: tiering disabled with remote.log.delete.on.disable: its remote data "
                     "is deleted", st.name)
        else:
            log.info("%s: tiering disabled: its remote data is left in place", st.name)

    def _delete_disabled(self) -> list[str]:
        """Deletes the remote data of the partitions whose tiering was disabled with
        remote.log.delete.on.disable (engine.rlm.expiration.delete_disabled); the failed
        ones wait for a later pass. Returns the errors."""
        with self._lock:
            pending, self._disabled = self._disabled, []
        errors, retry = expiration.delete_disabled(self, pending, _TASK_WAIT_S)
        if retry:
            with self._lock:
                self._disabled.extend(retry)
        return errors

    def _is_deleting(self, tp: TopicPartition, unified) -> bool:
        topic_id = self._deleting.get(tp)
        if topic_id is None:
            return False
        metadata = unified.partition_metadata  # a topic created again has a new id
        return metadata.exists() and metadata.read().topic_id == topic_id

    def _remote_deletion_recorded(self, tip: TopicIdPartition) -> bool:
        return self.rlmm.partition_delete_state(tip) is not None

    def _forget(self, tp: TopicPartition) -> None:
        st = self._partitions.pop(tp, None)
        if st is None:
            return
        st.deleted_partition = True
        if self._scheduler is not None:
            for kind in ("copy", "expiration", "follower"):
                self._scheduler.cancel(f"{kind}:{st.name}")
        self.metrics.remove_partition(st.topic, st.partition)

    def delete_partition(self, topic: str, partition: int, *, delete_local: bool = True) -> int:
        """Deletes the partition's remote data (DELETE_PARTITION_MARKED -> STARTED -> every
        segment deleted -> FINISHED) and, with `delete_local`, its local log
        (LogManager.delete_partition). Returns the remote segments deleted. Calling again
        after a failure resumes."""
        tp = TopicPartition(topic, int(partition))
        with self._lock:
            st = self._partitions.get(tp)
            self._forget(tp)
            self._explicit_roles.discard(tp)
            # kept even after a failure: tiering must not add segments to a partition whose
            # deletion is under way (calling again resumes it)
            if st is not None:
                self._deleting[tp] = st.tip.topic_id
        if st is not None:
            tip = st.tip
            expiration.wait_for_tasks(st, _TASK_WAIT_S)
        else:
            tip = self._find_tip(topic, int(partition))
            with self._lock:
                self._deleting[tp] = tip.topic_id
        deleted = expiration.delete_remote_partition(self, tip)
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
