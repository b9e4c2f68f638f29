"""The engine's default RemoteLogMetadataManager: durable metadata kept next to the logs.

Each partition's events go to its own append-only metadata log under
`<log.dir>/__remote_log_metadata/<topic>-<partition>-<topicIdBase64>/` (format in
docs/remote-log-metadata-format.md; files in engine.remote.metadata_log). A mutating call
checks the event against the partition's RemoteLogMetadataCache, appends it, fsyncs, then
applies it: when the call returns the event is durable and visible, and a refused event
(IllegalStateTransitionError, RemoteResourceNotFoundError) is neither written nor applied.
After `snapshot.interval.entries` events the partition's state is compacted into a snapshot
and a new log is started.

One writer per metadata directory (an exclusive lock on `<dir>/.lock`; a second writer gets
RemoteStorageError). Readers (`open_read_only`, e.g. a Spark driver) take no lock, never
write, and see the writer's later events after `refresh()`.

Partitions load on `on_partition_leadership_changes` or lazily on their first call, so a
restarted process answers at once. Where Kafka's topic-based manager shares one metadata
topic between brokers, this store serves one process; another backend can feed the same
RemoteLogMetadataCache.

configure() keys (the `rlmm.config.`-prefixed broker properties, prefix stripped):

| key                         | default                            | meaning                  |
|-----------------------------|------------------------------------|--------------------------|
| log.dir                     | (set by the broker)                | the first log dir        |
| broker.id                   | 0                                  | this broker, for logging |
| metadata.dir                | `<log.dir>/__remote_log_metadata`  | where the files go       |
| snapshot.interval.entries   | 1000                               | events per log before a  |
|                             |                                    | snapshot (>= 1)          |

Thread-safety: every method may be called from any thread; calls on one partition are
serialized by its lock, different partitions proceed in parallel.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from engine.config import ConfigError
from engine.errors import CorruptRemoteLogMetadataError, RemoteStorageError
from engine.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.remote.metadata_cache import RemoteLogMetadataCache
from engine.remote.metadata_log import (
    PartitionMetadataLog,
    encode_event,
    parse_partition_dir_name,
    partition_dir_name,
)
from engine.remote.metadata_manager import RemoteLogMetadataManager

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no writer lock
    fcntl = None

__all__ = [
    "BROKER_ID_CONFIG",
    "LOG_DIR_CONFIG",
    "METADATA_DIR_CONFIG",
    "METADATA_DIR_NAME",
    "SNAPSHOT_INTERVAL_ENTRIES_CONFIG",
    "EmbeddedRemoteLogMetadataManager",
]

log = logging.getLogger(__name__)

METADATA_DIR_NAME = "__remote_log_metadata"
LOCK_FILE_NAME = ".lock"
LOG_DIR_CONFIG = "log.dir"
BROKER_ID_CONFIG = "broker.id"
METADATA_DIR_CONFIG = "metadata.dir"
SNAPSHOT_INTERVAL_ENTRIES_CONFIG = "snapshot.interval.entries"
DEFAULT_SNAPSHOT_INTERVAL_ENTRIES = 1000


class _Partition:
    """One partition's files and cache; `cache` is None while not loaded. `offline` is the
    damage found loading it: kept (the files are not read again) until the partition is
    stopped."""

    __slots__ = ("cache", "failed", "files", "lock", "offline", "read_error")

    def __init__(self, files: PartitionMetadataLog):
        self.lock = threading.Lock()
        self.files = files
        self.cache: RemoteLogMetadataCache | None = None
        self.failed: BaseException | None = None
        self.offline: CorruptRemoteLogMetadataError | None = None
        self.read_error: str | None = None   # the last unreadable-files error logged


class EmbeddedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Durable per-partition metadata logs (see the module docstring).

    Args:
        metadata_dir: the directory holding the partition directories; None until
            `configure` gives `log.dir` (or `metadata.dir`).
        broker_id: this broker's id.
        snapshot_interval_entries: events per log before it is compacted (>= 1).
        read_only: a reader; prefer `open_read_only`.

    Errors: RemoteStorageError when the store cannot be used (not configured, closed,
    locked by another writer, a failed write, a write on a reader);
    CorruptRemoteLogMetadataError from loading a damaged partition; ConfigError from
    configure().
    """

    # every query is answered by the in-memory cache (a partition's files are read once)
    in_memory_queries = True

    def __init__(self, metadata_dir=None, broker_id: int = 0, *,
                 snapshot_interval_entries: int = DEFAULT_SNAPSHOT_INTERVAL_ENTRIES,
                 read_only: bool = False):
        self._lock = threading.Lock()
        self._partitions: dict[TopicIdPartition, _Partition] = {}
        self._read_only = bool(read_only)
        self._dir: Path | None = None
        self._lock_fd: int | None = None
        self._closed = False
        self.broker_id = _int_config(BROKER_ID_CONFIG, broker_id, minimum=-1)
        self._interval = _int_config(SNAPSHOT_INTERVAL_ENTRIES_CONFIG,
                                     snapshot_interval_entries, minimum=1)
        if metadata_dir is not None:
            self._open(Path(metadata_dir))

    @classmethod
    def open_read_only(cls, metadata_dir) -> EmbeddedRemoteLogMetadataManager:
        """A reader of `metadata_dir` with every partition in it loaded. It never writes
        and takes no lock; `refresh()` picks up what the writer appended since. A damaged
        partition is logged and left out; its own calls raise the error."""
        reader = cls(metadata_dir, read_only=True)
        reader.refresh()
        return reader

    def configure(self, configs: Mapping[str, str]) -> None:
        """Takes `log.dir`, `broker.id`, `metadata.dir` and `snapshot.interval.entries`
        (see the module docstring); other keys are ignored. ConfigError for a bad value or
        when no directory is known."""
        if BROKER_ID_CONFIG in configs:
            self.broker_id = _int_config(BROKER_ID_CONFIG, configs[BROKER_ID_CONFIG],
                                         minimum=-1)
        if SNAPSHOT_INTERVAL_ENTRIES_CONFIG in configs:
            self._interval = _int_config(SNAPSHOT_INTERVAL_ENTRIES_CONFIG,
                                         configs[SNAPSHOT_INTERVAL_ENTRIES_CONFIG], minimum=1)
        directory: str | Path | None = configs.get(METADATA_DIR_CONFIG)
        if directory is None and configs.get(LOG_DIR_CONFIG) is not None:
            directory = Path(configs[LOG_DIR_CONFIG]) / METADATA_DIR_NAME
        for key in (METADATA_DIR_CONFIG, LOG_DIR_CONFIG):
            if key in configs and not str(configs[key]).strip():
                raise ConfigError(key, configs[key], "a directory path")
        if directory is None:
            if self._dir is None:
                raise ConfigError(LOG_DIR_CONFIG, None, f"required (or {METADATA_DIR_CONFIG})")
            return
        path = Path(directory)
        if self._dir is not None:
            if path.resolve() != self._dir.resolve():
                raise ConfigError(METADATA_DIR_CONFIG, str(path), f"already open on {self._dir}")
            return
        self._open(path)

    def _open(self, directory: Path) -> None:
        if self._read_only or fcntl is None:
            self._dir = directory
            return
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RemoteStorageError(f"cannot open remote log metadata dir {directory}: "
                                     f"{exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RemoteStorageError(f"remote log metadata dir {directory} is in use by "
                                     "another writer") from None
        self._lock_fd = fd
        self._dir = directory   # only now: a writer without the lock must stay unusable

    # ---- properties ------------------------------------------------------------------------

    @property
    def metadata_dir(self) -> Path | None:
        return self._dir

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def snapshot_interval_entries(self) -> int:
        return self._interval

    # ---- partitions ------------------------------------------------------------------------

    def _entry(self, tip: TopicIdPartition) -> _Partition:
        if not isinstance(tip, TopicIdPartition):
            raise TypeError(f"expected a TopicIdPartition, got {type(tip).__name__}")
        with self._lock:
            if self._closed:
                raise RemoteStorageError("the remote log metadata manager is closed")
            if self._dir is None:
                raise RemoteStorageError("the remote log metadata manager is not configured")
            entry = self._partitions.get(tip)
            if entry is None:
                files = PartitionMetadataLog(self._dir / partition_dir_name(tip), tip,
                                             read_only=self._read_only)
                entry = self._partitions[tip] = _Partition(files)
            return entry

    @staticmethod
    def _load(entry: _Partition) -> RemoteLogMetadataCache:
        """The partition's cache, loading it when needed (entry.lock held). A damaged
        partition goes offline: its error is logged once and raised by every call."""
        if entry.offline is not None:
            raise copy.copy(entry.offline)  # a fresh traceback each time, not a growing one
        if entry.cache is None or entry.failed is not None:
            try:
                result = entry.files.load()
            except CorruptRemoteLogMetadataError as exc:
                entry.cache, entry.offline = None, exc
                log.error("Remote log metadata of %s is damaged: the partition is offline "
                          "(the others are not) until it is repaired and the partition "
                          "restarted: %s", entry.files.tip, exc)
                raise
            entry.cache, entry.failed = result.cache, None
            if result.dropped_bytes:
                log.info("Loaded %s (%d torn bytes %s)", entry.files.directory,
                         result.dropped_bytes,
                         "pending" if entry.files.read_only else "dropped")
        return entry.cache

    def _loaded(self, tip: TopicIdPartition) -> _Partition:
        entry = self._entry(tip)
        with entry.lock:
            self._load(entry)
        return entry

    def _query(self, tip: TopicIdPartition, question):
        entry = self._entry(tip)
        with entry.lock:
            return question(self._load(entry))

    def list_partitions(self) -> list[TopicIdPartition]:
        """The partitions with stored metadata (a directory) or loaded ones, by (topic,
        partition)."""
        found: set[TopicIdPartition] = set()
        with self._lock:
            directory = self._dir
            found.update(tip for tip, e in self._partitions.items()
                         if e.cache is not None and (len(e.cache) or
                                                     e.cache.partition_delete_state is not None))
        if directory is not None and directory.is_dir():
            for name in os.listdir(directory):
                tip = parse_partition_dir_name(name)
                if tip is not None and (directory / name).is_dir():
                    found.add(tip)
        return sorted(found, key=lambda t: (t.topic, t.partition, str(t.topic_id)))

    def partition_delete_state(self, tip: TopicIdPartition
                               ) -> RemotePartitionDeleteState | None:
        """The partition's deletion state, or None when no deletion was recorded."""
        return self._query(tip, lambda cache: cache.partition_delete_state)

    def refresh(self) -> None:
        """Reader: applies what the writer stored since the last load or refresh, and loads
        partitions that appeared meanwhile. A partition that fails is logged and unloaded
        (its next call retries and raises); the others go on. A writer's caches are always
        current: no-op."""
        if not self._read_only:
            return
        for tip in self.list_partitions():
            entry = self._entry(tip)
            with entry.lock:
                if entry.offline is not None:
                    continue  # damaged: logged when found; a new reader tries again
                try:
                    if entry.cache is None:
                        self._load(entry)
                    else:
                        entry.cache = entry.files.refresh(entry.cache)
                except CorruptRemoteLogMetadataError as exc:
                    entry.cache, entry.offline = None, exc   # offline, as _load does
                    log.error("Remote log metadata of %s is damaged: the partition is "
                              "offline: %s", tip, exc)
                except OSError:
                    entry.cache = None
                    log.exception("Could not read the remote log metadata of %s", tip)

    # ---- events ----------------------------------------------------------------------------

    def _store(self, tip: TopicIdPartition, event, check, apply) -> None:
        if self._read_only:
            raise RemoteStorageError(f"remote log metadata in {self._dir} is open read-only")
        entry = self._entry(tip)
        with entry.lock:
            cache = self._load(entry)
            check(cache)
            try:
                entry.files.append(encode_event(event))
            except OSError as exc:
                entry.failed = exc  # the next call reloads from what is on disk
                raise RemoteStorageError(f"cannot store remote log metadata for {tip} in "
                                         f"{entry.files.directory}: {exc}") from exc
            apply(cache)
            if entry.files.events_in_log >= self._interval:
                try:
                    entry.files.compact(cache)
                except OSError:  # the event is stored; compaction is retried next time
                    log.exception("Could not compact the remote log metadata of %s", tip)

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._store(metadata.topic_id_partition, metadata,
                    lambda c: c.check_add(metadata),
                    lambda c: c.add_copy_in_progress_segment(metadata))

    def update_remote_log_segment_metadata(self,
                                           update: RemoteLogSegmentMetadataUpdate) -> None:
        self._store(update.topic_id_partition, update,
                    lambda c: c.check_update(update),
                    lambda c: c.update_remote_log_segment_metadata(update))

    def put_remote_partition_delete_metadata(self,
                                             metadata: RemotePartitionDeleteMetadata) -> None:
        self._store(metadata.topic_id_partition, metadata,
                    lambda c: c.check_partition_delete(metadata),
                    lambda c: c.put_partition_delete_metadata(metadata))

    # ---- queries ---------------------------------------------------------------------------

    def remote_log_segment_metadata(self, topic_id_partition: TopicIdPartition,
                                    epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        return self._query(topic_id_partition,
                           lambda c: c.remote_log_segment_metadata(epoch_for_offset, offset))

    def highest_offset_for_epoch(self, topic_id_partition: TopicIdPartition,
                                 leader_epoch: int) -> int | None:
        return self._query(topic_id_partition,
                           lambda c: c.highest_offset_for_epoch(leader_epoch))

    def list_remote_log_segments(self, topic_id_partition: TopicIdPartition,
                                 leader_epoch: int | None = None
                                 ) -> Iterator[RemoteLogSegmentMetadata]:
        if leader_epoch is None:
            segments = self._query(topic_id_partition, lambda c: c.list_all_remote_log_segments())
        else:
            segments = self._query(topic_id_partition,
                                   lambda c: c.list_remote_log_segments(leader_epoch))
        return iter(segments)

    # ---- lifecycle -------------------------------------------------------------------------

    def on_partition_leadership_changes(self, leader_partitions: Iterable[TopicIdPartition],
                                        follower_partitions: Iterable[TopicIdPartition]
                                        ) -> None:
        """Loads these partitions' metadata (already loaded ones stay as they are). A
        partition that fails to load is logged and skipped: the others still load, and its
        own calls raise the error (is_ready says False, partition_error gives it)."""
        for tip in [*leader_partitions, *follower_partitions]:
            self.partition_error(tip)   # loads it; a failure is logged there

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Drops these partitions from memory; their files stay and load again on use."""
        for tip in partitions:
            entry = self._entry(tip)
            with entry.lock:
                entry.files.close()
                entry.cache = entry.offline = None

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the partition's metadata loads (loading it if needed)."""
        return self.partition_error(topic_id_partition) is None

    def partition_error(self, topic_id_partition: TopicIdPartition) -> Exception | None:
        """None when the partition's metadata loads (loading it if needed); else the error:
        CorruptRemoteLogMetadataError for damaged files (the partition stays offline until
        `on_stop_partitions`), or the OSError of files that cannot be read now (tried
        again on the next call; logged when it first occurs or changes, not at every
        call)."""
        entry = None
        try:
            entry = self._entry(topic_id_partition)
            with entry.lock:
                self._load(entry)
        except CorruptRemoteLogMetadataError as exc:
            return exc
        except OSError as exc:  # RemoteStorageError too: closed, not configured
            if entry is None:
                return exc
            if str(exc) != entry.read_error:
                entry.read_error = str(exc)
                log.warning("Remote log metadata of %s cannot be read: %s",
                            topic_id_partition, exc)
            return exc
        if entry.read_error is not None:
            entry.read_error = None
            log.info("Remote log metadata of %s can be read again", topic_id_partition)
        return None

    def offline_partitions(self) -> dict[TopicIdPartition, Exception]:
        """The partitions found damaged, with their errors."""
        with self._lock:
            entries = list(self._partitions.items())
        return {tip: e.offline for tip, e in entries if e.offline is not None}

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            entries = list(self._partitions.values())
        for entry in entries:
            with entry.lock:
                entry.files.close()
                entry.cache = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)   # releases the flock
            self._lock_fd = None

    def __repr__(self):
        mode = "read-only" if self._read_only else "writer"
        return f"EmbeddedRemoteLogMetadataManager({str(self._dir)!r}, {mode})"


def _int_config(key: str, value, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ConfigError(key, value, "an integer")
    if isinstance(value, int):
        number = value
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ConfigError(key, value, "an integer") from None
    if not minimum <= number <= 2**31 - 1:
        raise ConfigError(key, value, f"an integer in [{minimum}, {2**31 - 1}]")
    return number
