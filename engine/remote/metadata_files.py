"""Remote-log metadata read from files, for readers with no broker: Kafka's
`__remote_log_metadata` partitions (engine.remote.metadata_topic) or the embedded RLMM's
directory (engine.remote.metadata_log), whichever a path holds.

A path may be
- a Kafka log dir holding `__remote_log_metadata-<N>` partition directories, or one of
  those directories;
- the embedded RLMM's metadata directory (`<log.dir>/__remote_log_metadata`, holding
  `<topic>-<partition>-<topicId>` directories), or a log dir holding it.
Several paths (a broker's log dirs, several brokers') are read together. The partitions'
log start offsets come from the log dirs' `log-start-offset-checkpoint` files when present
(the highest one found: the leader's, retention only moves it forward).

Nothing here writes: the embedded RLMM's partitions are read as its read-only readers read
them (a torn tail is left for the writer), Kafka's partitions as committed records.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from engine.config import ConfigError
from engine.log.checkpoint import LOG_START_OFFSET_CHECKPOINT_FILENAME, OffsetCheckpointFile
from engine.remote.embedded_rlmm import METADATA_DIR_NAME
from engine.remote.metadata import TopicIdPartition
from engine.remote.metadata_cache import RemoteLogMetadataCache
from engine.remote.metadata_log import (
    PartitionMetadataLog,
    parse_partition_dir_name,
    partition_dir_name,
)
from engine.remote.metadata_topic import (
    RemoteLogMetadataState,
    RemoteLogMetadataTopic,
    is_metadata_partition_dir,
)

__all__ = ["RemoteLogMetadataFiles", "split_paths"]


def split_paths(value) -> list[str]:
    """Paths given as one comma-separated string or as a list."""
    if isinstance(value, (str, os.PathLike)):
        value = str(value).split(",")
    return [str(p).strip() for p in value if str(p).strip()]


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


class RemoteLogMetadataFiles:
    """The metadata under `paths` (see the module docstring). `key` names the option the
    paths came from in ConfigErrors. Thread-safe; Kafka's partitions are read once, on the
    first question, the embedded RLMM's partitions one by one as they are asked for."""

    def __init__(self, paths: Iterable | str, *, key: str = "remoteLogMetadataPath"):
        self.paths = [Path(p) for p in split_paths(paths)]
        if not self.paths:
            raise ConfigError(key, paths, "one or more directories")
        self.topic_partition_dirs: list[Path] = []
        self.embedded_dirs: list[Path] = []
        log_dirs: list[Path] = []
        for path in self.paths:
            log_dirs.append(self._classify(path, key))
        self._log_start_offsets: dict[tuple[str, int], int] = {}
        for log_dir in dict.fromkeys(log_dirs):
            checkpoint = log_dir / LOG_START_OFFSET_CHECKPOINT_FILENAME
            if checkpoint.is_file():
                for tp, offset in OffsetCheckpointFile(checkpoint, create=False).read().items():
                    key_tp = (tp.topic, tp.partition)
                    self._log_start_offsets[key_tp] = max(
                        offset, self._log_start_offsets.get(key_tp, offset))
        self._lock = threading.Lock()
        self._topic_state: RemoteLogMetadataState | None = None
        self._embedded: dict[TopicIdPartition, RemoteLogMetadataCache | None] = {}

    def _classify(self, path: Path, key: str) -> Path:
        """Records what `path` holds; returns its log dir."""
        if not path.is_dir():
            raise ConfigError(key, str(path), "a directory (a log dir, a "
                              "__remote_log_metadata-<N> partition or the embedded RLMM's "
                              "metadata directory)")
        if is_metadata_partition_dir(path):
            self.topic_partition_dirs.append(path)
            return path.parent
        subdirs = _subdirs(path)
        partitions = [p for p in subdirs if is_metadata_partition_dir(p)]
        if partitions:
            self.topic_partition_dirs.extend(partitions)
        if (path / METADATA_DIR_NAME).is_dir():
            self.embedded_dirs.append(path / METADATA_DIR_NAME)
        elif any(parse_partition_dir_name(p.name) is not None for p in subdirs):
            self.embedded_dirs.append(path)
            return path.parent
        elif not partitions:
            raise ConfigError(key, str(path), "holds no remote log metadata (no "
                              "__remote_log_metadata-<N> partitions, no embedded RLMM "
                              f"{METADATA_DIR_NAME} directory)")
        return path

    def __repr__(self):
        return f"RemoteLogMetadataFiles({', '.join(map(str, self.paths))})"

    def topic_state(self) -> RemoteLogMetadataState:
        """Kafka's partitions, read (once)."""
        with self._lock:
            if self._topic_state is None:
                self._topic_state = RemoteLogMetadataTopic(self.topic_partition_dirs).load()
            return self._topic_state

    def cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache | None:
        """The partition's metadata, None when no path knows the partition."""
        if self.topic_partition_dirs:
            cache = self.topic_state().caches.get(tip)
            if cache is not None:
                return cache
        with self._lock:
            if tip not in self._embedded:
                self._embedded[tip] = self._load_embedded(tip)
            return self._embedded[tip]

    def _load_embedded(self, tip: TopicIdPartition) -> RemoteLogMetadataCache | None:
        for directory in self.embedded_dirs:
            partition_dir = directory / partition_dir_name(tip)
            if partition_dir.is_dir():
                return PartitionMetadataLog(partition_dir, tip, read_only=True).load().cache
        return None

    def partitions(self) -> set[TopicIdPartition]:
        """Every partition some path holds metadata of."""
        out = set(self.topic_state().caches) if self.topic_partition_dirs else set()
        for directory in self.embedded_dirs:
            out.update(tip for p in _subdirs(directory)
                       if (tip := parse_partition_dir_name(p.name)) is not None)
        return out

    def log_start_offset(self, tip: TopicIdPartition) -> int | None:
        """The partition's log start offset from the log dirs' checkpoints, if any."""
        return self._log_start_offsets.get((tip.topic, tip.partition))
