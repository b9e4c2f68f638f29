"""The RemoteLogManager's scheduled tasks (Kafka's RLMScheduledThreadPools of the copy,
expiration and follower tasks).

Once started, each leader (every tiered partition the registry finds, until
`on_leadership_change` says otherwise: the engine is a single broker) has a copy task on
the copier pool and an expiration task on the expiration pool, each follower a follower
task on the follower pool, each run `remote.log.manager.task.interval.ms` after the
previous one ended (the first at once; engine.rlm.pools.TaskScheduler); a partition whose
role changes has its tasks scheduled for its new role.

One more task, on the follower pool, is the scheduling pass: it syncs the registry of
partitions (engine.rlm.partitions), which schedules the partitions created since, retries
the deletion of the remote data of partitions whose tiering was turned off, and reports
once a copy that has run longer than five minutes (the RSM may be stuck: Kafka has no
per-copy timeout either; copies of that partition wait, others go on).

A plugin call that hangs holds one thread of its pool and that partition's task only:
appends, local reads and other partitions go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from engine.rlm.pools import TaskScheduler, WorkerPool
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.config import BrokerConfig
    from engine.rlm.tasks import RLMTasks

__all__ = ["RLMScheduler"]

# the log records of every part of the RemoteLogManager keep its logger name
log = logging.getLogger("engine.rlm.manager")

#: a copy running longer than this is reported once (Kafka has no per-copy timeout either)
STUCK_COPY_WARN_MS = 300_000

_TASK_KINDS = ("copy", "expiration", "follower")


class RLMScheduler:
    """The pools and the scheduler of one RemoteLogManager's tasks (see the module notes).
    Nothing runs before `start`; `schedule` and `cancel` are no-ops until then.

    Args:
        config: the broker's configuration (the pools' sizes).
        tasks: runs one partition's tasks (engine.rlm.tasks).
        sync: the registry's pass: the partitions' states, sorted.
        delete_disabled: deletes the remote data of partitions whose tiering was turned off.
        clock: now in ms.
        interval_ms: `remote.log.manager.task.interval.ms`, the scheduling pass's delay.
    """

    def __init__(self, *, config: BrokerConfig, tasks: RLMTasks,
                 sync: Callable[[], list[PartitionState]],
                 delete_disabled: Callable[[], object], clock: Callable[[], int],
                 interval_ms: int):
        self.config, self.tasks = config, tasks
        self._sync, self._delete_disabled = sync, delete_disabled
        self.clock, self.interval_ms = clock, interval_ms
        self.copier_pool: WorkerPool | None = None
        self.expiration_pool: WorkerPool | None = None
        self.follower_pool: WorkerPool | None = None
        self._scheduler: TaskScheduler | None = None

    @property
    def started(self) -> bool:
        return self._scheduler is not None

    def start(self) -> None:
        """Starts the pools and the scheduler; `schedule_all` then schedules the tasks. The
        caller starts it once, under its lock."""
        cfg = self.config
        self.copier_pool = WorkerPool(cfg["remote.log.manager.copier.thread.pool.size"],
                                      name="kafka-rlm-copier")
        self.expiration_pool = WorkerPool(cfg["remote.log.manager.expiration.thread.pool.size"],
                                          name="kafka-rlm-expiration")
        self.follower_pool = WorkerPool(cfg.follower_thread_pool_size,
                                        name="kafka-rlm-follower")
        self._scheduler = TaskScheduler()

    def schedule_all(self, states: Iterable[PartitionState]) -> None:
        """Schedules the tasks of `states` and the scheduling pass, each first run at once."""
        for st in states:
            self.schedule(st)
        assert self._scheduler is not None, "schedule_all before start"
        self._scheduler.schedule("sync-partitions", self._scheduled_sync, self.follower_pool)

    def copier_idle_percent(self) -> float:
        """Idle share of the copier threads (100 before they start)."""
        pool = self.copier_pool
        return pool.busy.idle_percent() if pool is not None else 100.0

    def schedule(self, st: PartitionState) -> None:
        """Schedules the partition's tasks for its role (replacing those scheduled)."""
        sched = self._scheduler
        if sched is None:
            return
        tasks = self.tasks
        if st.is_leader:
            sched.schedule(f"copy:{st.name}", lambda: tasks.scheduled_copy(st),
                           self.copier_pool)
            sched.schedule(f"expiration:{st.name}", lambda: tasks.scheduled_expiration(st),
                           self.expiration_pool)
        else:
            sched.schedule(f"follower:{st.name}", lambda: tasks.scheduled_follower(st),
                           self.follower_pool)

    def cancel(self, st: PartitionState) -> None:
        """Cancels the partition's tasks (a running one ends its run)."""
        if self._scheduler is not None:
            for kind in _TASK_KINDS:
                self._scheduler.cancel(f"{kind}:{st.name}")

    def _scheduled_sync(self) -> int:
        now = self.clock()
        states = self._sync()
        self._delete_disabled()
        for st in states:
            running = st.copy.copy_in_progress
            if running is not None and now - running[1] > STUCK_COPY_WARN_MS and \
                    st.stuck_copy_warned != running:
                st.stuck_copy_warned = running
                log.warning("The copy of segment %d of %s has run for %d ms: the RSM may be "
                            "stuck (copies of this partition wait; others go on)", running[0],
                            st.name, now - running[1])
        return self.interval_ms

    def close(self) -> None:
        """Stops the scheduler, then the pools (a thread stuck in a plugin call is
        abandoned: the threads are daemons)."""
        if self._scheduler is not None:
            self._scheduler.close()
        for pool in (self.copier_pool, self.expiration_pool, self.follower_pool):
            if pool is not None:
                pool.close()
