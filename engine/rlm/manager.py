"""The RemoteLogManager (KIP-405's RLM): tiers closed segments, expires remote ones, serves
reads and ListOffsets across both tiers (Kafka's RemoteLogManager: RLMCopyTask,
RLMExpirationTask, RLMFollowerTask, asyncRead and findOffsetByTimestamp).

This module is the composition root: the manager builds its parts, each given only the
collaborators it uses, and answers for them.

- `PartitionRegistry` (engine.rlm.partitions): the partitions served and their roles,
  tiering turned off, partition deletion; `_partitions` is its map of `PartitionState`.
- `RLMCopier` (engine.rlm.copier): the copy task, its per-partition `CopyState` and backoff.
- `RLMExpirationTask` (engine.rlm.expiration): remote retention, the deletion of remote
  segments and partitions.
- `RLMFollowerTask` and `TierStateMachine` (engine.rlm.follower): the follower task and a
  follower's partition built from the tier.
- `RLMTasks` (engine.rlm.tasks): one partition's runs of those tasks; offline partitions.
- `RLMScheduler` (engine.rlm.scheduling): the copier, expiration and follower pools and the
  scheduling of every partition's tasks, from `start()`.
- `RemoteLogReader` (engine.rlm.fetch, on the reader pool): reads and ListOffsets.
- the quotas (engine.rlm.quota), the metrics (engine.rlm.metrics), the index cache.

`run_once()` runs every task once on the calling thread (tests, `--until-idle`); `status()`
describes every partition (engine.rlm.status).

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from engine.common import TopicPartition
from engine.config import BrokerConfig, ConfigError
from engine.remote.index_cache import DIR_NAME as INDEX_CACHE_DIR_NAME
from engine.remote.index_cache import RemoteIndexCache
from engine.remote.metadata_manager import RemoteLogMetadataManager
from engine.remote.segment_access import NextPositions
from engine.remote.storage import RemoteStorageManager
from engine.rlm import copier, offsets
from engine.rlm.expiration import RLMExpirationTask
from engine.rlm.fetch import RemoteLogReader
from engine.rlm.follower import RLMFollowerTask, TierStateMachine
from engine.rlm.metrics import RLMMetrics, register_gauges
from engine.rlm.partitions import TASK_WAIT_S, PartitionRegistry
from engine.rlm.pools import ExponentialBackoff, RemoteLogReaderPool
from engine.rlm.quota import RLMQuotas
from engine.rlm.reader import RemoteFetchResult
from engine.rlm.scheduling import RLMScheduler
from engine.rlm.state import PartitionState
from engine.rlm.status import partition_status
from engine.rlm.tasks import RLMTasks, RunSummary

__all__ = ["RemoteLogManager", "RunSummary"]

log = logging.getLogger(__name__)

def _now_ms() -> int:
    return int(time.time() * 1000)


def _validate(config: BrokerConfig) -> None:
    """Cross-rules the RLM relies on (BrokerConfig checks each key's own range)."""
    if not config["remote.log.storage.system.enable"]:
        raise ConfigError("remote.log.storage.system.enable", False,
                          "must be true for the RemoteLogManager to run")
    if config["remote.log.index.file.cache.total.size.bytes"] < 1:
        raise ConfigError("remote.log.index.file.cache.total.size.bytes",
                          config["remote.log.index.file.cache.total.size.bytes"],
                          "must be at least 1")


class RemoteLogManager:
    """See the module docstring.

    Args:
        broker_config: the broker's configuration (`remote.log.*` keys).
        log_manager: the local logs (engine.log.LogManager).
        rsm, rlmm: the configured plugins; closed by `close()` only when built by
            `from_config`.
        broker_id: stamped on metadata events.
        clock: now in ms (tests); a clock with `sleep(ms)` also drives quota waits.
        index_cache: a RemoteIndexCache to use (default: one in
            `<first log dir>/remote-log-index-cache`, sized by
            `remote.log.index.file.cache.total.size.bytes`).

    Raises:
        ConfigError: tiering is off (`remote.log.storage.system.enable=false`), or a
            cross-rule between keys fails.
    """

    def __init__(self, broker_config: BrokerConfig, log_manager, rsm: RemoteStorageManager,
                 rlmm: RemoteLogMetadataManager, *, broker_id: int = 0,
                 clock: Callable[[], int] | None = None,
                 index_cache: RemoteIndexCache | None = None):
        _validate(broker_config)
        self.config = broker_config
        self.log_manager = log_manager
        self.rsm, self.rlmm = rsm, rlmm
        self.broker_id = int(broker_id)
        self.clock = clock or _now_ms
        self.started_ms = self.clock()
        self._owns_plugins = False
        self._closed = False
        self._lock = threading.RLock()
        self.metrics = RLMMetrics()
        # the plugin's own metrics (an object store's requests, errors, caches) are served
        # on the same port
        rsm.register_metrics(self.metrics.registry)
        self.custom_metadata_max_bytes = broker_config[
            "remote.log.metadata.custom.metadata.max.bytes"]
        self.interval_ms = broker_config["remote.log.manager.task.interval.ms"]
        self.backoff = ExponentialBackoff(
            broker_config["remote.log.manager.task.retry.backoff.ms"],
            broker_config["remote.log.manager.task.retry.backoff.max.ms"],
            broker_config["remote.log.manager.task.retry.jitter"])
        self.quotas = RLMQuotas(broker_config, self.clock, lambda: self._closed)
        first_dir = Path(log_manager.log_dirs[0])
        self._owns_index_cache = index_cache is None
        self.index_cache = index_cache or RemoteIndexCache(
            rsm, first_dir / INDEX_CACHE_DIR_NAME,
            broker_config["remote.log.index.file.cache.total.size.bytes"])
        self.expiration = self._new_expiration()
        self.copier = self._new_copier()
        self.follower = RLMFollowerTask(rlmm=rlmm)
        self.tier_state_machine = TierStateMachine(log_manager=log_manager, rlmm=rlmm,
                                                   rsm=rsm, metrics=self.metrics)
        self.tasks = RLMTasks(rlmm=rlmm, copier=self.copier, expiration=self.expiration,
                              follower=self.follower, metrics=self.metrics, clock=self.clock,
                              started_ms=self.started_ms, interval_ms=self.interval_ms)
        self.scheduler = RLMScheduler(
            config=broker_config, tasks=self.tasks, sync=lambda: self._registry.sync(),
            delete_disabled=lambda: self._registry.delete_disabled(), clock=self.clock,
            interval_ms=self.interval_ms)
        #: the partitions served (engine.rlm.partitions); `_partitions` is its map
        self._registry = self._new_registry()
        self._partitions = self._registry.partitions
        self.reader_pool = RemoteLogReaderPool(broker_config["remote.log.reader.threads"],
                                               broker_config["remote.log.reader.max.pending.tasks"])
        self.reader = self._new_reader()
        self.metrics_port: int | None = None
        register_gauges(
            self.metrics, reader_pool=self.reader_pool,
            copier_idle_percent=self.scheduler.copier_idle_percent,
            offline_log_dirs=lambda: len(log_manager.offline_dirs),
            offline_partitions=self._registry.offline_count,
            copy_quota_sensor=self.quotas.copy_sensor,
            fetch_quota_sensor=self.quotas.fetch_sensor)

    def _new_registry(self) -> PartitionRegistry:
        """The partition registry, with what it may use of this manager."""
        return PartitionRegistry(
            log_manager=self.log_manager, rlmm=self.rlmm, metrics=self.metrics,
            lock=self._lock, schedule=self.scheduler.schedule, cancel=self.scheduler.cancel,
            delete_disabled=partial(self.expiration.delete_disabled, wait_s=TASK_WAIT_S),
            delete_remote_partition=self.expiration.delete_remote_partition)

    def _new_reader(self) -> RemoteLogReader:
        """The reads and ListOffsets, with what they may use of this manager
        (engine.rlm.fetch)."""
        cfg = self.config
        return RemoteLogReader(
            rlmm=self.rlmm, rsm=self.rsm, index_cache=self.index_cache,
            next_positions=NextPositions(), metrics=self.metrics, fetch_rate=self.quotas.fetch_rate,
            fetch_quota_sensor=self.quotas.fetch_sensor, reader_pool=self.reader_pool,
            fetch_max_wait_ms=cfg["remote.fetch.max.wait.ms"],
            list_offsets_timeout_ms=cfg["remote.list.offsets.request.timeout.ms"],
            inline_reads=self.rlmm.in_memory_queries, log_and_state=self._log_and_state)

    def _new_expiration(self) -> RLMExpirationTask:
        """The expiration task and remote deletions, with what they may use of this manager
        (engine.rlm.expiration)."""
        return RLMExpirationTask(
            rlmm=self.rlmm, rsm=self.rsm, index_cache=self.index_cache, metrics=self.metrics,
            clock=self.clock, backoff=self.backoff, broker_id=self.broker_id,
            started_ms=self.started_ms,
            initialise_leader=lambda st: self.copier.initialise_leader(st))

    def _new_copier(self) -> copier.RLMCopier:
        """The copy task, with what it may use of this manager (engine.rlm.copier)."""
        return copier.RLMCopier(
            rlmm=self.rlmm, rsm=self.rsm, metrics=self.metrics, clock=self.clock,
            backoff=self.backoff, copy_quota=self.quotas.copy, broker_id=self.broker_id,
            custom_metadata_max_bytes=self.custom_metadata_max_bytes,
            interval_ms=self.interval_ms, closed=lambda: self._closed,
            delete_remote_segment=self.expiration.delete_remote_segment)

    @classmethod
    def from_config(cls, broker_config: BrokerConfig, log_manager, *,
                    clock: Callable[[], int] | None = None) -> RemoteLogManager:
        """An RLM with the RSM and RLMM named by the config (engine.remote.factory)."""
        from engine.remote import factory

        _validate(broker_config)
        first_dir = log_manager.log_dirs[0]
        rsm = factory.create_remote_storage_manager(broker_config)
        try:
            rlmm = factory.create_remote_log_metadata_manager(broker_config, first_dir)
        except BaseException:
            rsm.close()
            raise
        broker_id = max(0, broker_config.broker_id)
        try:
            rlm = cls(broker_config, log_manager, rsm, rlmm, broker_id=broker_id, clock=clock)
        except BaseException:
            rlmm.close()
            rsm.close()
            raise
        rlm._owns_plugins = True
        return rlm

    @property
    def closed(self) -> bool:
        """Whether `close` was called (a running copy stops after its current segment)."""
        return self._closed

    # -- partitions ------------------------------------------------------------------------

    def on_leadership_change(self, leaders: Mapping[tuple[str, int], int],
                             followers: Mapping[tuple[str, int], int] | Iterable = ()) -> None:
        """Makes this engine leader of `leaders` ((topic, partition) -> leader epoch) and
        follower of `followers`. A new epoch restarts the partition's copy task (it finds
        the highest copied offset again; a cancelled copy task resumes)."""
        followers = dict(followers) if isinstance(followers, Mapping) else {
            tuple(tp): None for tp in followers}
        self._registry.change_leadership(leaders, followers)

    def _sync_partitions(self) -> list[PartitionState]:
        """The registry's pass (PartitionRegistry.sync): the states, sorted."""
        return self._registry.sync()

    def delete_partition(self, topic: str, partition: int, *, delete_local: bool = True) -> int:
        """Deletes the partition's remote data and, with `delete_local`, its local log (see
        PartitionRegistry.delete_partition). Returns the remote segments deleted."""
        return self._registry.delete_partition(topic, partition, delete_local=delete_local)

    def build_remote_log_aux_state(self, topic: str, partition: int, *,
                                   leader_log_start_offset: int,
                                   leader_local_log_start_offset: int,
                                   target_epoch: int) -> int:
        """Kafka's buildRemoteLogAuxState: TierStateMachine.build_remote_log_aux_state
        (engine.rlm.follower) for this partition."""
        with self._lock:
            st = self._partitions.get(TopicPartition(topic, int(partition)))
        return self.tier_state_machine.build_remote_log_aux_state(
            st, topic, partition, leader_log_start_offset=leader_log_start_offset,
            leader_local_log_start_offset=leader_local_log_start_offset,
            target_epoch=target_epoch)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the pools and schedules every tiered partition's tasks (first run at
        once); serves the metrics when `engine.metrics.port` is set. Idempotent."""
        with self._lock:
            if self._closed:
                raise ValueError("start on a closed RemoteLogManager")
            if self.scheduler.started:
                return
            self.scheduler.start()
            port = self.config["engine.metrics.port"]
            if port is not None:
                self.metrics_port = self.metrics.serve(port, self.config["engine.metrics.host"])
            states = list(self._partitions.values())
        self.scheduler.schedule_all(states)

    # -- synchronous pass ------------------------------------------------------------------

    def run_once(self) -> RunSummary:
        """Runs every partition's tasks once on this thread: copy (honouring a pending retry
        backoff), local retention, expiration (leaders); follower tasks. A task of a
        partition that is still running on the scheduler (e.g. a hung copy) is waited for
        up to 30 s, then skipped with an error in the summary."""
        summary = RunSummary()
        states = self._sync_partitions()
        summary.errors, summary.retry_in_ms = self._registry.run_once(self.clock)
        for st in states:
            self.tasks.run_once(st, summary)
        return summary

    def is_idle(self) -> bool:
        """True when no partition has a segment left to copy, a copy in progress or a
        remote segment to delete (a copy that keeps failing is not idle)."""
        states = self._sync_partitions()
        if self._registry.disabled:  # remote data of a partition whose tiering was turned off
            return False
        return all(self.tasks.is_idle(st) for st in states)

    def initialise_partitions(self, topic: str | None = None,
                              partition: int | None = None) -> None:
        """Brings the state of every tiered leader (or of `topic`/`partition`) up to date
        as its first copy run does, without copying: the log start offset and the highest
        offset in remote storage from the tier. `list_offsets` and `status` call it, so a
        fresh process answers latest-tiered and copy lag right; scheduled runs do it
        anyway. Raises what the RLMM raises; an offline partition is skipped (its own
        calls raise) unless `topic` and `partition` name it."""
        self.tasks.initialise(self._sync_partitions(), topic, partition)

    # -- serving ---------------------------------------------------------------------------

    def _log_and_state(self, topic: str, partition: int):
        unified, st = self._registry.log_and_state(topic, partition)
        if st is not None:
            self.tasks.check_online(st)
        return unified, st

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             min_one_message: bool = True,
             isolation: str = "read_uncommitted") -> RemoteFetchResult:
        """Kafka's RemoteLogManager.read: RemoteLogReader.read (engine.rlm.fetch)."""
        return self.reader.read(topic, partition, offset, max_bytes, min_one_message,
                                isolation)

    def read_many(self, requests: Iterable[tuple], *, min_one_message: bool = True,
                  isolation: str = "read_uncommitted") -> list[RemoteFetchResult]:
        """Several partitions' reads: RemoteLogReader.read_many (engine.rlm.fetch)."""
        return self.reader.read_many(requests, min_one_message=min_one_message,
                                     isolation=isolation)

    def list_offsets(self, topic: str, partition: int, spec) -> tuple[int, int]:
        """(offset, leader epoch) for `spec`: -2/"earliest", -1/"latest",
        -4/"earliest-local", -5/"latest-tiered" or a timestamp in ms (see
        engine.rlm.offsets). (-1, -1) when there is no such offset. A remote timestamp
        search runs on the reader pool, bounded by `remote.list.offsets.request.timeout.ms`.
        """
        unified, st = self._log_and_state(topic, partition)
        spec = offsets.parse_spec(spec)
        if st is not None:
            self.tasks.ensure_initialised(st)
            # the earliest offset, and a timestamp search that starts in the tier, would
            # answer from offsets no tier holds
            if st.copy.metadata_gap is not None and (spec == offsets.EARLIEST or spec >= 0):
                raise copier.gap_error(st, st.log.log_start_offset)
        return self.reader.list_offsets(unified, st, spec)

    # -- status, deletion, close -----------------------------------------------------------

    def status(self) -> list[dict]:
        """One dict per tiered partition: offsets of both tiers, sizes, copy lag, the copy
        in progress and the last errors."""
        states = self._sync_partitions()
        for st in states:
            self.tasks.refresh_for_status(st)
        return [partition_status(st, rlmm=self.rlmm, now_ms=self.clock(),
                                 retention_error=self.log_manager.retention_error)
                for st in states]

    def close(self) -> None:
        """Stops the scheduler and pools (a thread stuck in a plugin call is abandoned: the
        threads are daemons), the metrics server, the index cache it created, and the
        plugins when `from_config` built them. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.scheduler.close()
        self.reader_pool.close()
        self.metrics.close()
        if self._owns_index_cache:
            self.index_cache.close()
        if self._owns_plugins:
            for plugin in (self.rlmm, self.rsm):
                try:
                    plugin.close()
                except Exception as exc:
                    log.warning("Closing %s failed: %s", type(plugin).__name__, exc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

