"""The partition logs of a broker's `log.dirs` (the local part of Kafka's `LogManager`).

Each log dir holds partition directories `<topic>-<partition>` and its own checkpoint files
(Kafka's CheckpointFile): `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`
and, after a clean shutdown, `.kafka_cleanshutdown`. `meta.properties` is not required.

Kafka's rules kept here:

- Start: the log dirs load in parallel (one thread per dir, at most `max_load_threads`).
  In each, `.kafka_cleanshutdown` is read then deleted before any log is opened, so a crash
  during loading or later is never taken for a clean shutdown; every `<topic>-<partition>`
  directory opens as a `UnifiedLog` with the dir's recovery point and log start offset for
  it (a missing or unreadable checkpoint means 0: everything is scanned). Directories whose
  names are not partition names are skipped, and so is KRaft's `__cluster_metadata-0`.
- Placement: a new partition goes to the online dir holding the fewest partitions; ties
  go to the dir listed first (Kafka's nextLogDirs).
- Topic names: Kafka's rules (`validate_topic_name`). Topic ids: one per topic
  (`topic_id`, engine.log.topic_ids); a new partition gets its topic's.
- Checkpoints: `checkpoint_recovery_points` writes every log's recovery point per dir;
  `checkpoint_log_start_offsets` writes the log start offsets that are not the log's
  first segment's base offset (Kafka writes those above it; the others are implied by the
  segments, except the start of a tiered log, always written).
- The log start offsets are checkpointed at once after a DeleteRecords moved one
  (`delete_records`, or `UnifiedLog.delete_records` on a managed log), and by
  `maybe_checkpoint_log_start_offsets` every `log.flush.start.offset.checkpoint.interval.ms`
  (Kafka's periodic task; the caller runs it), so a crash loses no acknowledged deletion and
  at most that interval of starts moved by retention or the remote tier.
- Shutdown: every log is flushed and closed, both checkpoints written, then
  `.kafka_cleanshutdown` (`{"version":0,"brokerEpoch":N}`, as Kafka 3.5+) in each dir still
  online.
- Failure: an OSError while loading a dir or in an operation on it (reported through
  `_handle_dir_failure`) takes the dir offline: its logs are closed as far as possible and
  every later read, append or lookup of its partitions raises `KafkaStorageError` naming
  the dir. The other dirs keep working; no new partition is placed on an offline dir.
  A corrupt `leader-epoch-checkpoint` (CorruptCheckpointError is an OSError, Kafka's
  IOException) counts as such a failure; other errors while loading (a topic id that does
  not match, the same partition in two dirs) stop the start, as they stop Kafka's.

- Tiering: a log's `remote_log_enabled` comes from the broker's
  `remote.log.storage.system.enable` and its topic's `remote.storage.enable`
  (`UnifiedLog.is_remote_log_enabled`); a tiered log's start offset is always checkpointed,
  as it may lie below its first local segment.
- Retention: `cleanup_logs` runs `delete_old_segments` on every online log.
- Deletion: `delete_partition` renames the directory to `<topic>-<partition>.<uuid>-delete`
  and removes it; such leftovers are removed at the next start.

Not done here: retention and flush schedulers (callers call `cleanup_logs`, `flush_all` and
the checkpoint methods), moving partitions between dirs (`-future` logs), stray logs.
Topic configs (`topic_overrides`, `update_topic_config`, `get_or_create_log`) are kept in
memory only (Kafka keeps them in the metadata log): pass them again at each start.

Thread-safety: the manager's maps are guarded by one lock; each log has its own.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engine.common import TopicPartition, Uuid, fsync_dir, write_file_atomically
from engine.config import BrokerConfig, TopicConfig
from engine.errors import (
    CorruptCheckpointError,
    InconsistentTopicIdError,
    InvalidTopicError,
    KafkaStorageError,
    UnknownTopicOrPartitionError,
)
from engine.log.checkpoint import OffsetCheckpointFile
from engine.log.topic_ids import agreed_topic_id
from engine.log.unified_log import UnifiedLog

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "MAX_TOPIC_NAME_LENGTH",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "LogManager",
    "parse_partition_dir_name",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_INT32_MAX = 2**31 - 1
#: KRaft's metadata topic: its log is the raft layer's, never loaded here (Kafka's rule).
METADATA_TOPIC = "__cluster_metadata"
#: `<topic>-<partition>.<32 hex uuid>-delete`: a partition directory being deleted.
_DELETE_DIR = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")


def validate_topic_name(topic: str) -> None:
    """Kafka's Topic.validate. Raises InvalidTopicError saying which rule failed."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic name {topic!r} is illegal: it must not be empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is illegal: it cannot be '.' or '..'")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic[:20]!r}... is illegal: it is {len(topic)} characters long, "
            f"more than the maximum of {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'")


def _recorded_topic_id(unified: UnifiedLog) -> Uuid | None:
    metadata = unified.partition_metadata
    return metadata.read().topic_id if metadata.exists() else None


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) of a `<topic>-<partition>` directory name, or None when the name
    is not one (a legal topic name, a dash, a partition number in int32 range)."""
    topic, dash, number = name.rpartition("-")
    if not dash or not number.isdigit() or (len(number) > 1 and number[0] == "0"):
        return None
    partition = int(number)
    if partition > _INT32_MAX:
        return None
    try:
        validate_topic_name(topic)
    except InvalidTopicError:
        return None
    return TopicPartition(topic, partition)


def _is_dir_failure(exc: BaseException) -> bool:
    """An I/O error of the disk (not one of our typed errors that are also OSErrors, nor a
    storage error raised for a dir already offline)."""
    return isinstance(exc, OSError) and not isinstance(exc, KafkaStorageError)


class LogManager:
    """The logs of several log dirs. Loading happens in the constructor.

    Args:
        log_dirs: the `log.dirs`, in order (created when missing).
        broker_config: a `BrokerConfig` or a mapping of broker properties (Kafka names);
            its topic-config synonyms (`log.segment.bytes`, `log.roll.ms`, ...) give the
            default topic config. Default: Kafka's defaults.
        topic_defaults: topic-config overrides (Kafka names, e.g. {"segment.bytes": 1 << 20})
            applied to every log unless `get_or_create_log` is given its own config.
        topic_overrides: per-topic configs (topic -> overrides under Kafka's names), used
            for the logs of that topic loaded at start and created later (Kafka keeps them
            in its metadata log; here the caller passes them at each start).
        max_load_threads: bound on the threads loading dirs in parallel (default: one per
            dir, at most 16).
        broker_epoch: written to `.kafka_cleanshutdown` at shutdown.
        clock: now in ms, for the logs (tests).
    """

    def __init__(self, log_dirs: Iterable[str | os.PathLike], *,
                 broker_config: BrokerConfig | Mapping[str, Any] | None = None,
                 topic_defaults: Mapping[str, Any] | None = None,
                 topic_overrides: Mapping[str, Mapping[str, Any]] | None = None,
                 max_load_threads: int | None = None, broker_epoch: int = -1,
                 clock: Callable[[], int] | None = None):
        dirs = [Path(d) for d in log_dirs]
        if not dirs:
            raise ValueError("LogManager needs at least one log dir")
        if len({os.path.abspath(d) for d in dirs}) != len(dirs):
            raise ValueError(f"duplicate log dirs in {[str(d) for d in dirs]}")
        if broker_config is None:
            broker_config = BrokerConfig({})
        elif not isinstance(broker_config, BrokerConfig):
            broker_config = BrokerConfig({k: str(v) for k, v in broker_config.items()})
        self.broker_config = broker_config
        self._topic_defaults = dict(topic_defaults or {})
        self.default_topic_config = TopicConfig.resolve(self._topic_defaults, broker_config)
        #: topic -> its TopicConfig when it has overrides (see `update_topic_config`).
        self._topic_level: dict[str, TopicConfig] = {
            topic: self._resolve_topic(overrides)
            for topic, overrides in (topic_overrides or {}).items()}
        self.log_dirs: list[Path] = dirs
        self.broker_epoch = int(broker_epoch)
        self._clock = clock
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, UnifiedLog] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._topic_configs: dict[TopicPartition, TopicConfig] = {}
        #: topic -> its one topic id, once `topic_id` checked its partitions (taken before
        #: `_lock` when both are held)
        self._topic_ids: dict[str, Uuid] = {}
        self._topic_id_lock = threading.RLock()
        self._offline: dict[Path, str] = {}  # dir -> why
        # partition -> why its last local retention run failed (cleared by one that succeeds)
        self._retention_errors: dict[TopicPartition, str] = {}
        self._offline_partitions: dict[TopicPartition, Path] = {}
        #: dir -> whether its last shutdown was clean (as found at start).
        self.had_clean_shutdown: dict[Path, bool] = {}
        #: partitions whose load scanned segments (not a clean shutdown), per dir.
        self.recovered_partitions: dict[Path, list[TopicPartition]] = {d: [] for d in dirs}
        self._shut_down = False
        #: serializes checkpoint writes (a DeleteRecords and the periodic task may race).
        self._checkpoint_lock = threading.RLock()
        self._last_start_offset_checkpoint = self._now()
        workers = max(1, min(len(dirs), max_load_threads or 16))
        try:
            if workers == 1:
                for d in dirs:
                    self._load_dir(d)
            else:
                with ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix="log-dir-loader") as pool:
                    for future in [pool.submit(self._load_dir, d) for d in dirs]:
                        future.result()
        except BaseException:
            self._close_all_quietly()
            raise

    # -- loading ---------------------------------------------------------------------------

    def _load_dir(self, log_dir: Path) -> None:
        found: list[TopicPartition] = []
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            if clean:
                marker.unlink()
            with self._lock:
                self.had_clean_shutdown[log_dir] = clean
            recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT_FILE)
            start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT_FILE)
            names = sorted(p.name for p in log_dir.iterdir() if p.is_dir())
            loaded = 0
            for name in names:
                if _DELETE_DIR.match(name):
                    # Kafka finishes an interrupted partition deletion at start.
                    log.info("Deleting %s in log dir %s: a partition deleted before the "
                             "last shutdown", name, log_dir)
                    shutil.rmtree(log_dir / name)
                    continue
                tp = parse_partition_dir_name(name)
                if tp is None:
                    log.info("Skipping %s in log dir %s: not a partition directory", name,
                             log_dir)
                    continue
                if tp.topic == METADATA_TOPIC:
                    # KRaft's metadata log belongs to the raft layer, not to the LogManager.
                    log.info("Skipping %s in log dir %s: the KRaft metadata log", name,
                             log_dir)
                    continue
                found.append(tp)
                with self._lock:
                    if tp in self._logs:
                        other = self._log_dir_of[tp]
                        raise ValueError(f"partition {tp.topic}-{tp.partition} is in both "
                                         f"{other} and {log_dir}")
                config = self._topic_level.get(tp.topic, self.default_topic_config)
                unified = UnifiedLog.open(
                    log_dir / name, recovery_point=recovery_points.get(tp, 0),
                    clean_shutdown=clean, log_start_offset=start_offsets.get(tp),
                    clock=self._clock, **self._log_params(tp.topic, config))
                unified.log_start_offset_listener = self._on_log_start_offset_moved
                with self._lock:
                    self._logs[tp] = unified
                    self._log_dir_of[tp] = log_dir
                    self._topic_configs[tp] = config
                    if not clean:
                        self.recovered_partitions[log_dir].append(tp)
                loaded += 1
            log.info("Loaded %d partition(s) from log dir %s (%s shutdown)", loaded, log_dir,
                     "clean" if clean else "unclean")
        except Exception as exc:
            if not _is_dir_failure(exc):
                raise
            with self._lock:  # the partitions not loaded yet are offline too
                for tp in found:
                    if tp not in self._logs:
                        self._offline_partitions[tp] = log_dir
            self._handle_dir_failure(log_dir, exc)

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        if not path.exists():
            return {}
        try:
            return OffsetCheckpointFile(path, create=False).read()
        except CorruptCheckpointError as exc:
            log.warning("Ignoring unreadable checkpoint %s (its logs are recovered from "
                        "offset 0): %s", path, exc)
            return {}

    def _log_params(self, topic: str, config: TopicConfig) -> dict[str, Any]:
        return {"config": config, "remote_log_enabled": self._remote_log_enabled(topic, config)}

    def _remote_log_enabled(self, topic: str, config: TopicConfig) -> bool:
        return UnifiedLog.is_remote_log_enabled(
            self.broker_config["remote.log.storage.system.enable"], config, topic)

    def _resolve_topic(self, overrides: Mapping[str, Any]) -> TopicConfig:
        return TopicConfig.resolve({**self._topic_defaults, **dict(overrides)},
                                   self.broker_config)

    # -- failure ---------------------------------------------------------------------------

    def _handle_dir_failure(self, log_dir, exc: BaseException) -> None:
        """Takes `log_dir` offline after `exc` (an I/O error): its partitions become offline
        (their logs are closed as far as the disk allows), the others keep working."""
        log_dir = self._dir_key(log_dir)
        with self._lock:
            if log_dir in self._offline:
                return
            self._offline[log_dir] = f"{type(exc).__name__}: {exc}"
            victims = [tp for tp, d in self._log_dir_of.items() if d == log_dir]
            logs = [self._logs.pop(tp) for tp in victims]
            for tp in victims:
                del self._log_dir_of[tp]
                self._offline_partitions[tp] = log_dir
            offline = sorted(tp for tp, d in self._offline_partitions.items() if d == log_dir)
        log.error("Log dir %s is offline after %s: %s; %d partition(s) offline: %s", log_dir,
                  type(exc).__name__, exc, len(offline),
                  ", ".join(f"{t}-{p}" for t, p in offline) or "none")
        for tp, unified in zip(victims, logs):
            self._take_offline(tp, log_dir, unified)

    def _take_offline(self, tp: TopicPartition, log_dir: Path, unified: UnifiedLog) -> None:
        # A reference held elsewhere must not reach the failed disk any more.
        unified.close_offline(lambda what: self._storage_error(tp, log_dir, what))

    def _storage_error(self, tp: TopicPartition, log_dir: Path,
                       what: str = "access") -> KafkaStorageError:
        why = self._offline.get(log_dir, "failed")
        return KafkaStorageError(
            f"{what} on partition {tp[0]}-{tp[1]}: its log dir {log_dir} is offline ({why})",
            log_dir=log_dir, partition=TopicPartition(*tp))

    def _dir_key(self, log_dir) -> Path:
        path = Path(log_dir)
        for d in self.log_dirs:
            if d == path or os.path.abspath(d) == os.path.abspath(path):
                return d
        raise ValueError(f"{log_dir} is not one of the log dirs {[str(d) for d in self.log_dirs]}")

    def _run(self, log_dir: Path, what: str, fn: Callable[[], Any]) -> Any:
        """Runs an operation on `log_dir`; an I/O error takes the dir offline."""
        try:
            return fn()
        except Exception as exc:
            if not _is_dir_failure(exc):
                raise
            self._handle_dir_failure(log_dir, exc)
            raise KafkaStorageError(f"{what} failed: log dir {log_dir} is offline "
                                    f"({type(exc).__name__}: {exc})",
                                    log_dir=log_dir) from exc

    @property
    def offline_dirs(self) -> list[Path]:
        """The dirs taken offline, in log.dirs order."""
        with self._lock:
            return [d for d in self.log_dirs if d in self._offline]

    @property
    def online_dirs(self) -> list[Path]:
        with self._lock:
            return [d for d in self.log_dirs if d not in self._offline]

    @property
    def offline_partitions(self) -> dict[TopicPartition, Path]:
        with self._lock:
            return dict(self._offline_partitions)

    # -- logs ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> UnifiedLog | None:
        """The partition's log, None when there is none. KafkaStorageError when its dir is
        offline."""
        tp = TopicPartition(topic, int(partition))
        with self._lock:
            if tp in self._offline_partitions:
                raise self._storage_error(tp, self._offline_partitions[tp], "get_log")
            return self._logs.get(tp)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        tp = TopicPartition(topic, int(partition))
        with self._lock:
            return self._log_dir_of.get(tp, self._offline_partitions.get(tp))

    def partitions(self) -> list[TopicPartition]:
        """Online partitions, sorted."""
        with self._lock:
            return sorted(self._logs)

    def partition_counts(self) -> dict[Path, int]:
        """Online dir -> how many partitions it holds."""
        with self._lock:
            counts = {d: 0 for d in self.log_dirs if d not in self._offline}
            for d in self._log_dir_of.values():
                if d in counts:
                    counts[d] += 1
            return counts

    def _next_log_dir(self) -> Path:
        counts = self.partition_counts()
        if not counts:
            raise KafkaStorageError(
                "no online log dir to place a new partition in (offline: "
                + ", ".join(f"{d} ({why})" for d, why in self._offline.items()) + ")")
        order = {d: i for i, d in enumerate(self.log_dirs)}
        return min(counts, key=lambda d: (counts[d], order[d]))

    def topic_config(self, topic: str, partition: int | None = None) -> TopicConfig:
        """The config of the partition's log (UnknownTopicOrPartitionError when there is
        none), or with no partition the config new logs of the topic get."""
        with self._lock:
            if partition is None:
                return self._topic_level.get(topic, self.default_topic_config)
            config = self._topic_configs.get(TopicPartition(topic, int(partition)))
        if config is None:
            raise UnknownTopicOrPartitionError.no_log(topic, partition)
        return config

    def update_topic_config(self, topic: str, overrides: Mapping[str, Any]) -> TopicConfig:
        """Replaces the topic's overrides (Kafka names; the manager's topic defaults and
        the broker config fill the rest) and applies the result to every open log of the
        topic, including `remote_log_enabled`. Returns the new config.

        Raises ConfigError on an unknown or invalid value or a tiering rule broken (e.g.
        remote.storage.enable without remote.log.storage.system.enable); nothing changes
        then.
        """
        config = self._resolve_topic(overrides)
        enabled = self._remote_log_enabled(topic, config)
        with self._lock:
            self._topic_level[topic] = config
            logs = [(tp, unified) for tp, unified in self._logs.items() if tp.topic == topic]
            for tp, _ in logs:
                self._topic_configs[tp] = config
        for _, unified in logs:
            unified.update_config(config)
            unified.remote_log_enabled = enabled
        log.info("Updated the config of topic %s (%d open log(s)): %s", topic, len(logs),
                 config)
        return config

    def topic_id(self, topic: str) -> Uuid:
        """The topic's one id (engine.log.topic_ids): the one its partitions'
        `partition.metadata` record, written to those that have none (a new one when none
        has one). InconsistentTopicIdError when they disagree; UnknownTopicOrPartitionError
        when no partition of the topic is open here."""
        with self._topic_id_lock:
            known = self._topic_ids.get(topic)
            if known is not None:
                return known
            with self._lock:
                logs = sorted((tp, u, self._log_dir_of[tp]) for tp, u in self._logs.items()
                              if tp.topic == topic)
            if not logs:
                raise UnknownTopicOrPartitionError(f"no log of topic {topic} here",
                                                   topic=topic)
            recorded = {tp: self._run(d, f"reading the topic id of {tp.topic}-{tp.partition}",
                                      functools.partial(_recorded_topic_id, u))
                        for tp, u, d in logs}
            topic_id = agreed_topic_id(topic, recorded)
            for tp, u, d in logs:
                if recorded[tp] is None:
                    self._run(d, f"writing the topic id of {tp.topic}-{tp.partition}",
                              functools.partial(u.partition_metadata.write, topic_id))
            self._topic_ids[topic] = topic_id
            return topic_id

    def get_or_create_log(self, topic: str, partition: int, topic_id: Uuid | str | None = None,
                          topic_config: TopicConfig | Mapping[str, Any] | None = None
                          ) -> UnifiedLog:
        """The partition's log, created in the online dir with the fewest partitions if it
        does not exist. `topic_config` is a TopicConfig or topic overrides (Kafka names);
        `topic_id` is written to `partition.metadata` (ValueError if it differs from the one
        there); a new partition always gets its topic's id (`topic_id`: a new one for a new
        topic when not given).

        Raises:
            InvalidTopicError: an illegal topic name. ValueError: a negative partition.
            InconsistentTopicIdError: a new partition given an id other than its topic's.
            KafkaStorageError: the partition's dir is offline, or no dir is online, or the
                dir failed while creating it (the dir is then offline).
        """
        validate_topic_name(topic)
        if int(partition) < 0 or int(partition) > _INT32_MAX:
            raise ValueError(f"partition {partition} of topic {topic!r} is out of range")
        tp = TopicPartition(topic, int(partition))
        with self._topic_id_lock:
            with self._lock:
                exists = tp in self._logs
            if exists:
                return self._get_or_create_log(tp, topic_id, topic_config)
            topic_id = self._new_partition_topic_id(tp, topic_id)
            unified = self._get_or_create_log(tp, topic_id, topic_config)
            self._topic_ids[topic] = topic_id
            return unified

    def _new_partition_topic_id(self, tp: TopicPartition, topic_id) -> Uuid:
        """The id a new partition gets: its topic's; `topic_id` must be that one."""
        if topic_id is not None and not isinstance(topic_id, Uuid):
            topic_id = Uuid.from_string(str(topic_id))
        with self._lock:
            has_partitions = any(t.topic == tp.topic for t in self._logs)
        if not has_partitions and tp.topic not in self._topic_ids:
            return Uuid.random() if topic_id is None else topic_id
        known = self.topic_id(tp.topic)
        if topic_id is not None and topic_id != known:
            raise InconsistentTopicIdError(
                f"topic id {topic_id} given to new partition {tp.topic}-{tp.partition} "
                f"differs from {known}, the id of topic {tp.topic}", topic=tp.topic,
                topic_ids={f"{tp.topic}-{tp.partition}": str(topic_id)})
        return known

    def _get_or_create_log(self, tp: TopicPartition, topic_id,
                           topic_config: TopicConfig | Mapping[str, Any] | None
                           ) -> UnifiedLog:
        topic, partition = tp
        with self._lock:
            if self._shut_down:
                raise ValueError("get_or_create_log on a LogManager that was shut down")
            if tp in self._offline_partitions:
                raise self._storage_error(tp, self._offline_partitions[tp], "get_or_create_log")
            existing = self._logs.get(tp)
            if existing is not None:
                if topic_id is not None:
                    self._run(self._log_dir_of[tp], f"topic id check of {topic}-{partition}",
                              lambda: self._check_topic_id(existing, topic_id))
                return existing
            if topic_config is None:
                config = self._topic_level.get(topic, self.default_topic_config)
            elif isinstance(topic_config, TopicConfig):
                config = topic_config
            else:
                config = TopicConfig.resolve(dict(topic_config), self.broker_config)
            log_dir = self._next_log_dir()
            unified = self._run(log_dir, f"creating partition {topic}-{partition}",
                                lambda: UnifiedLog.open(log_dir / f"{topic}-{tp.partition}",
                                                        topic_id=topic_id, clock=self._clock,
                                                        **self._log_params(topic, config)))
            unified.log_start_offset_listener = self._on_log_start_offset_moved
            self._logs[tp] = unified
            self._log_dir_of[tp] = log_dir
            self._topic_configs[tp] = config
            log.info("Created log for partition %s-%d in %s", topic, tp.partition, log_dir)
            return unified

    @staticmethod
    def _check_topic_id(unified: UnifiedLog, topic_id) -> None:
        if not isinstance(topic_id, Uuid):
            topic_id = Uuid.from_string(str(topic_id))
        metadata = unified.partition_metadata
        if metadata.exists():
            existing = metadata.read().topic_id
            if existing != topic_id:
                raise ValueError(f"topic id {topic_id} differs from {existing} recorded in "
                                 f"{metadata.file}")
        else:
            metadata.write(topic_id)

    def _online_log(self, topic: str, partition: int, what: str) -> tuple[UnifiedLog, Path]:
        tp = TopicPartition(topic, int(partition))
        with self._lock:
            if tp in self._offline_partitions:
                raise self._storage_error(tp, self._offline_partitions[tp], what)
            unified = self._logs.get(tp)
            if unified is None:
                raise UnknownTopicOrPartitionError.no_log(topic, partition)
            return unified, self._log_dir_of[tp]

    def append_as_leader(self, topic: str, partition: int, records,
                         leader_epoch: int) -> tuple[int, int]:
        """`UnifiedLog.append_as_leader` on the partition; an I/O error takes its dir
        offline (KafkaStorageError)."""
        unified, d = self._online_log(topic, partition, "append")
        return self._run(d, f"append to {topic}-{partition}",
                         lambda: unified.append_as_leader(records, leader_epoch))

    def append_as_follower(self, topic: str, partition: int, records) -> tuple[int, int]:
        unified, d = self._online_log(topic, partition, "append")
        return self._run(d, f"append to {topic}-{partition}",
                         lambda: unified.append_as_follower(records))

    def read(self, topic: str, partition: int, offset: int, max_bytes: int,
             min_one_message: bool = True) -> tuple[memoryview, int]:
        """`UnifiedLog.read` on the partition; an I/O error takes its dir offline."""
        unified, d = self._online_log(topic, partition, "read")
        return self._run(d, f"read of {topic}-{partition}",
                         lambda: unified.read(offset, max_bytes, min_one_message))

    # -- flushing, checkpoints, shutdown ---------------------------------------------------

    def _logs_by_dir(self) -> dict[Path, list[tuple[TopicPartition, UnifiedLog]]]:
        with self._lock:
            out: dict[Path, list[tuple[TopicPartition, UnifiedLog]]] = {
                d: [] for d in self.log_dirs if d not in self._offline}
            for tp in sorted(self._logs):
                d = self._log_dir_of[tp]
                if d in out:
                    out[d].append((tp, self._logs[tp]))
            return out

    def checkpoint_recovery_points(self) -> None:
        """Writes each online dir's `recovery-point-offset-checkpoint` (partitions sorted)."""
        for d, logs in self._logs_by_dir().items():
            offsets: dict[tuple[str, int], int] = {tp: unified.recovery_point
                                                   for tp, unified in logs}
            checkpoint = OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT_FILE, create=False)
            self._try(d, "recovery point checkpoint", functools.partial(checkpoint.write, offsets))

    def checkpoint_log_start_offsets(self, log_dir: str | os.PathLike | None = None) -> None:
        """Writes each online dir's (or only `log_dir`'s) `log-start-offset-checkpoint`:
        the tiered partitions (their start may lie below the first local segment) and those
        whose log start offset is not their first segment's base offset (Kafka writes those
        above it; one below it is a tiered log opened with tiering off, kept for later).
        A dir whose write fails goes offline (logged, not raised)."""
        with self._checkpoint_lock:
            self._last_start_offset_checkpoint = self._now()
            for d, logs in self._logs_by_dir().items():
                if log_dir is None or d == self._dir_key(log_dir):
                    self._try(d, "log start offset checkpoint",
                              functools.partial(self._write_start_offsets, d, logs))

    @staticmethod
    def _write_start_offsets(log_dir: Path, logs) -> None:
        offsets = {tp: unified.log_start_offset for tp, unified in logs
                   if unified.remote_log_enabled
                   or unified.log_start_offset != unified.segments[0].base_offset}
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT_FILE,
                             create=False).write(offsets)

    def maybe_checkpoint_log_start_offsets(self) -> bool:
        """The periodic task (Kafka's kafka-log-start-offset-checkpoint): checkpoints the
        log start offsets when `log.flush.start.offset.checkpoint.interval.ms` has passed
        since the last checkpoint, so that starts moved by retention or by the remote tier
        survive a crash within that interval. Returns whether it checkpointed."""
        interval = self.broker_config["log.flush.start.offset.checkpoint.interval.ms"]
        if self._now() - self._last_start_offset_checkpoint < interval:
            return False
        self.checkpoint_log_start_offsets()
        return True

    def _now(self) -> int:
        return self._clock() if self._clock is not None else int(time.time() * 1000)

    def _on_log_start_offset_moved(self, unified: UnifiedLog) -> None:
        """A DeleteRecords (or the remote expiration, before it deletes) moved `unified`'s
        start: checkpointed at once, as a crash must not bring back records whose deletion
        was acknowledged nor leave the start below segments already deleted."""
        log_dir = self._dir_key(unified.dir.parent)
        self.checkpoint_log_start_offsets(log_dir)
        with self._lock:
            why = self._offline.get(log_dir)
        if why is not None:
            raise KafkaStorageError(f"the log start offset of {unified.dir} could not be "
                                    f"checkpointed: log dir {log_dir} is offline ({why})")

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """`UnifiedLog.delete_records` on the partition (Kafka's DeleteRecords): the new log
        start offset is checkpointed before this returns. Returns the log start offset.
        KafkaStorageError when the dir is offline or fails now."""
        unified, d = self._online_log(topic, partition, "delete_records")
        return self._run(d, f"delete records of {topic}-{partition}",
                         lambda: unified.delete_records(offset))

    def delete_partition(self, topic: str, partition: int) -> Path | None:
        """Deletes the partition's local log (Kafka's asyncDelete): the log is closed and
        forgotten, its directory renamed to `<topic>-<partition>.<uuid>-delete` (so that a
        crash leaves a name the next start deletes) and removed, and both checkpoints of its
        dir rewritten without it. Returns the directory removed, None when there was no
        log. KafkaStorageError when its dir is offline (or fails now)."""
        tp = TopicPartition(topic, int(partition))
        with self._lock:
            if tp in self._offline_partitions:
                raise self._storage_error(tp, self._offline_partitions[tp], "delete_partition")
            unified = self._logs.pop(tp, None)
            if unified is None:
                return None
            log_dir = self._log_dir_of.pop(tp)
            self._topic_configs.pop(tp, None)
            if not any(t.topic == topic for t in self._logs):
                self._topic_ids.pop(topic, None)  # a topic created again has a new id

        def remove() -> Path:
            unified.close()
            doomed = log_dir / f"{topic}-{tp.partition}.{uuid.uuid4().hex}-delete"
            os.replace(unified.dir, doomed)
            fsync_dir(log_dir)
            shutil.rmtree(doomed)
            return unified.dir

        removed = self._run(log_dir, f"deletion of partition {topic}-{partition}", remove)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        log.info("Deleted partition %s-%d from %s", topic, tp.partition, log_dir)
        return removed

    def cleanup_logs(self) -> int:
        """`delete_old_segments` on every online log (Kafka's retention task). A dir whose
        deletion fails goes offline (`offline_dirs`) and the partition keeps the failure as
        its `retention_error`; the others are still cleaned. Returns the number of segments
        deleted."""
        total = 0
        for d, logs in self._logs_by_dir().items():
            for tp, unified in logs:
                try:
                    total += self._run(d, f"retention of {tp.topic}-{tp.partition}",
                                       unified.delete_old_segments)
                except KafkaStorageError as exc:
                    with self._lock:
                        self._retention_errors[tp] = f"{type(exc).__name__}: {exc}"
                    break
                if tp in self._retention_errors:
                    with self._lock:
                        self._retention_errors.pop(tp, None)
        return total

    def retention_error(self, topic: str, partition: int) -> str | None:
        """Why the partition's last local retention run (`cleanup_logs`) failed, or None."""
        with self._lock:
            return self._retention_errors.get(TopicPartition(topic, partition))

    def _try(self, log_dir: Path, what: str, fn: Callable[[], Any]) -> bool:
        """Like `_run` for background work: the failure takes the dir offline and is logged,
        not raised. Returns whether `fn` succeeded."""
        try:
            self._run(log_dir, what, fn)
            return True
        except KafkaStorageError:
            return False

    def flush_all(self) -> None:
        """fsyncs every online log up to its end, then checkpoints the recovery points. A
        dir whose flush fails goes offline; the others are still flushed."""
        for d, logs in self._logs_by_dir().items():
            for _, unified in logs:
                if not self._try(d, f"flush of {unified.dir}", unified.flush):
                    break
        self.checkpoint_recovery_points()

    def shutdown(self) -> None:
        """Closes every log (flushing it), writes both checkpoints and `.kafka_cleanshutdown`
        in each dir that is still online. Idempotent."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        by_dir = self._logs_by_dir()
        for d, logs in by_dir.items():
            for _, unified in logs:
                if not self._try(d, f"close of {unified.dir}", unified.close):
                    break
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        marker = json.dumps({"version": 0, "brokerEpoch": self.broker_epoch},
                            separators=(",", ":")).encode()
        for d in self.online_dirs:
            self._try(d, "clean shutdown marker",
                      functools.partial(write_file_atomically, d / CLEAN_SHUTDOWN_FILE, marker))
        log.info("Shut down log manager: %d dir(s) clean, %d offline", len(self.online_dirs),
                 len(self.offline_dirs))

    def _close_all_quietly(self) -> None:
        with self._lock:
            logs = list(self._logs.values())
        for unified in logs:
            try:
                unified.close()
            except Exception as exc:  # noqa: BLE001 - the start's own error is the one raised
                log.debug("Closing %s after a failed start: %s", unified.dir, exc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    def __repr__(self):
        return (f"LogManager(dirs={[str(d) for d in self.log_dirs]}, "
                f"partitions={len(self._logs)}, offline={[str(d) for d in self.offline_dirs]})")
