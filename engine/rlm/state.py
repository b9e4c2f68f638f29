"""What the RemoteLogManager keeps per partition it serves, and how it is created."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from engine.common import TopicPartition, Uuid
from engine.log.unified_log import UnifiedLog
from engine.remote.metadata import TopicIdPartition
from engine.remote.remote_log import RemoteLog
from engine.rlm.copier import CopyState

__all__ = ["PartitionState", "new_state"]

# the log records of every part of the RemoteLogManager keep its logger name
log = logging.getLogger("engine.rlm.manager")


@dataclass(eq=False)
class PartitionState:
    """One partition: its log, role, copy state and the errors of its last runs.

    `copy_lock` / `expiration_lock` make a partition's copy (or expiration) runs exclusive:
    the scheduler and `run_once` may both want to run them.
    """

    topic: str
    partition: int
    tip: TopicIdPartition
    log: UnifiedLog
    leader_epoch: int
    is_leader: bool = True
    #: the copy task's state (engine.rlm.copier)
    copy: CopyState = field(default_factory=CopyState)
    #: the copy in progress (CopyState.copy_in_progress) already reported as stuck
    stuck_copy_warned: tuple[int, int] | None = None
    #: failed expiration runs in a row, and when the next may run (the copy's retry backoff)
    expiration_failures: int = 0
    next_expiration_attempt_ms: int = 0
    last_expiration_error: str | None = None
    last_fetch_error: str | None = None
    #: why the last local retention run (UnifiedLog.delete_old_segments) failed; None once
    #: one succeeds
    last_local_retention_error: str | None = None
    #: why the partition's remote log metadata cannot be served (RLMM.partition_error):
    #: it is offline, its tasks do not run and its calls raise this
    offline_error: Exception | None = None
    remote_segment_count: int = 0
    remote_size_bytes: int = 0
    deleted_partition: bool = False
    #: the read model of the partition's remote part (engine.remote.remote_log), built by
    #: the first remote read
    remote_log: RemoteLog | None = field(default=None, repr=False)
    copy_lock: threading.Lock = field(default_factory=threading.Lock)
    expiration_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def needs_initialisation(self) -> bool:
        """Whether the copy state must be (re)initialised from the remote metadata."""
        return self.copy.needs_initialisation(self.log)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def new_state(tp: TopicPartition, unified, epoch: int | None, is_leader: bool,
              topic_id: Uuid) -> PartitionState:
    """The state of a partition the RLM starts to serve (`epoch` None: its latest epoch);
    `topic_id` is its topic's one id (LogManager.topic_id)."""
    if epoch is None:
        latest = unified.leader_epoch_cache.latest_epoch
        epoch = 0 if latest is None else latest
    tip = TopicIdPartition(topic_id, tp[0], int(tp[1]))
    return PartitionState(tp[0], int(tp[1]), tip, unified, int(epoch), is_leader)
