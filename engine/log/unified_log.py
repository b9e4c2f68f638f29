"""The local log of one partition directory (the local part of Kafka's `UnifiedLog`).

A partition directory holds segments (see `engine.log.segment`), `leader-epoch-checkpoint`
and, when the topic id is known, `partition.metadata`. `UnifiedLog` loads them, recovers
what may be damaged, appends as leader (assigning offsets, stamping the leader epoch) or as
follower (keeping the offsets), rolls segments with Kafka's rules, reads across segments,
keeps producer state and the transaction index, and applies retention with the tiering rules.

Kafka's rules kept here (kafka-reference.md §2):

- Loading: `.deleted`, `.cleaned` and temporary checkpoint files are removed; a `.log.swap`
  replaces the segments its offsets cover and its indexes are rebuilt; index files without a
  `.log` are removed.
- Recovery: every segment from the one holding the recovery point on is scanned with CRCs
  (`LogSegment.recover`) unless the shutdown was clean; segments whose indexes are missing or
  fail their sanity check are recovered in any case. The first segment truncated by its
  recovery ends the log: the later segments are deleted, and what was dropped is logged at
  WARNING. Nothing before the first invalid batch is dropped.
- Rolling before an append when the active segment's size > segment.bytes - incoming size,
  an index is full, the largest incoming offset does not fit relative to the base offset,
  or the incoming max timestamp is more than segment.ms past the segment's first batch's
  max timestamp (its creation time when it has no timestamp), minus the segment's jitter:
  a random value in [0, min(segment.jitter.ms, segment.ms)) drawn when the segment is
  created or loaded (0 when segment.jitter.ms is 0), so that partitions do not all roll at
  once.
- The epoch cache is assigned (epoch, first offset of the batch) for each v2 batch whose
  partition leader epoch is above the latest one, and checkpointed at once.

- Tiering (kafka-reference.md §3.5): `remote_log_enabled` (broker and topic settings, see
  `is_remote_log_enabled`), `highest_offset_in_remote_storage`, a log start offset that may
  lie below the first local segment (`local_log_start_offset`), reads below the local start
  refused with OffsetOutOfRangeError. `delete_old_segments` applies retention.ms (by each
  segment's largest timestamp), retention.bytes and the log-start breach; a tiered log with
  copy enabled uses local.retention.* (-2: the totals), deletes only what
  `_may_delete_locally` allows (its last offset tiered) and rolls a breached active segment.
  `truncate_fully_and_start_at` restarts the log empty at an offset with its log start
  below it, as a follower built from the tier does (engine.rlm.follower), installing the
  fetched epoch entries and producer snapshot.
- Producer state: batches with a producer id update `ProducerStateManager`; COMMIT/ABORT
  markers complete transactions and aborts are appended to the segment's `.txnindex` with
  their last stable offset; `<base>.snapshot` is written at each roll (fsynced by the next
  flush) and at close, deleted with its segment; loading and truncation rebuild the state
  from the latest snapshot at or below the first segment recovered (or the truncation
  point) and replay the batches after it, rewriting the recovered segments' `.txnindex`.
- The high watermark is the log end offset (one replica); the last stable offset is the
  first offset of the earliest open transaction, else the high watermark.

Not done here: LOG_APPEND_TIME rewriting on leader appends (batches keep their
timestamps), sequence/epoch
validation of producer appends (no duplicate detection),
and producer expiry (producer.id.expiration.ms). Segments deleted by retention are renamed
to `.deleted` and unlinked `file.delete.delay.ms` later (by a later retention pass or at
close); truncation and recovery delete at once.

Thread-safety: every public method serializes on one lock. Views returned by `read` follow
`LogSegment.read`'s rules (invalid after truncation or deletion of their segment).
"""

from __future__ import annotations

import bisect
import enum
import logging
import mmap
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engine._native import records as _records
from engine.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigSource,
    ResolvedValue,
    TopicConfig,
)
from engine.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidOffsetError,
    InvalidRecordError,
    OffsetOutOfRangeError,
)
from engine.log._abstract_index import INT32_MAX
from engine.log.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    PartitionMetadataFile,
    Uuid,
    fsync_dir,
    write_file_atomically,
)
from engine.log.leader_epoch import LeaderEpochFileCache
from engine.log.producer_state import (
    ProducerStateManager,
    apply_batches,
    decode_snapshot,
    snapshot_file,
)
from engine.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from engine.log.transaction_index import AbortedTxn
from engine.records import MemoryRecords

__all__ = ["LEADER_EPOCH_CHECKPOINT_FILE", "PARTITION_METADATA_FILE", "UnifiedLog"]

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
_NO_TIMESTAMP = -1
#: ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
_MIN_MAGIC = 2
#: draws each segment's roll jitter (a module attribute so that tests can seed it).
_jitter_random = random.Random()


#: Topics Kafka never tiers (internal topics, the RLMM's topic, the KRaft metadata log).
_NEVER_TIERED_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                                  "__remote_log_metadata", "__cluster_metadata"})


class LogStartOffsetIncrementReason(enum.Enum):
    """Why the log start offset moved (Kafka's LogStartOffsetIncrementReason)."""

    LEADER_OFFSET_INCREMENTED = "leader offset increment"
    CLIENT_RECORD_DELETION = "client delete records request"
    SNAPSHOT_GENERATED = "snapshot generated"
    SEGMENT_DELETION = "segment deletion"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _resolve_config(config, overrides: dict[str, int | None]) -> TopicConfig:
    """A TopicConfig from `config` (TopicConfig, topic overrides or None) with the non-None
    `overrides` applied as topic overrides."""
    if config is None or isinstance(config, Mapping):
        given = dict(config or {})
        given.update({k: v for k, v in overrides.items() if v is not None})
        return TopicConfig.resolve(given, BrokerConfig({}))
    if not isinstance(config, TopicConfig):
        raise TypeError(f"config must be a TopicConfig or a mapping, got {type(config).__name__}")
    entries = dict(config.items())
    for name, value in overrides.items():
        if value is not None:
            entries[name] = ResolvedValue(TOPIC_CONFIGS[name].parse(value),
                                          ConfigSource.DYNAMIC_TOPIC_CONFIG, name)
    changed = any(v is not None for v in overrides.values())
    return TopicConfig(entries) if changed else config


class _EpochAssigner:
    """Feeds recovered batch headers to the epoch cache (Kafka's recovery rule)."""

    def __init__(self, cache: LeaderEpochFileCache):
        self.cache = cache

    def update(self, headers: np.ndarray) -> None:
        _assign_epochs(self.cache, headers)


def _assign_epochs(cache: LeaderEpochFileCache, headers: np.ndarray) -> None:
    # Only the rows where the epoch rises change the cache; they are found in native code.
    latest = cache.latest_epoch
    for epoch, start_offset in _records.epoch_rises(headers, -1 if latest is None else latest):
        cache.assign(epoch, start_offset)


class UnifiedLog:
    """One partition directory's local log. Use `UnifiedLog.open`."""

    def __init__(self, directory, *, config: TopicConfig, recovery_point: int,
                 clock: Callable[[], int]):
        self.dir = Path(directory)
        self.config = config
        # The roll check reads these on every append: plain attributes, not config lookups
        # (refreshed by `update_config`).
        self._segment_bytes: int = config["segment.bytes"]
        self._segment_ms: int = config["segment.ms"]
        self._segment_jitter_ms: int = config["segment.jitter.ms"]
        #: base offset -> the segment's roll jitter (Kafka's LogSegment.rollJitterMs).
        self._roll_jitter_ms: dict[int, int] = {}
        self.recovery_point = max(0, int(recovery_point))
        self._clock = clock
        self._lock = threading.RLock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        #: base offset -> the segment's rolling timestamp (first batch's max timestamp, or
        #: its creation time when it has none), filled lazily.
        self._rolling_ts: dict[int, int] = {}
        self._created_ms: dict[int, int] = {}
        self._log_start_offset = 0
        self._highest_offset_in_remote_storage = -1
        #: bumped by every truncation that drops offsets (see `truncation_epoch`).
        self._truncation_epoch = 0
        self._remote_log_enabled = False
        self._closed = False
        self._producer_state = ProducerStateManager(self.dir)
        #: snapshots written at roll without fsync; fsynced by the next flush (Kafka's).
        self._unsynced_snapshots: set[Path] = set()
        #: (due time in ms, files renamed to `.deleted`) of segments deleted by retention.
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self.leader_epoch_cache: LeaderEpochFileCache | None = None
        self.partition_metadata = PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE)
        #: called with this log after `delete_records` moved the log start offset.
        self.log_start_offset_listener: Callable[[UnifiedLog], None] | None = None

    # -- configuration ---------------------------------------------------------------------

    @property
    def segment_bytes(self) -> int:
        return self._segment_bytes

    @property
    def segment_ms(self) -> int:
        return self._segment_ms

    @property
    def index_interval_bytes(self) -> int:
        return self.config["index.interval.bytes"]

    @property
    def segment_index_bytes(self) -> int:
        return self.config["segment.index.bytes"]

    @property
    def topic(self) -> str | None:
        """The topic of a `<topic>-<partition>` directory name (None for other names)."""
        topic, dash, number = self.dir.name.rpartition("-")
        return topic if dash and number.isdigit() else None

    @staticmethod
    def is_remote_log_enabled(remote_storage_system_enable: bool, config: TopicConfig,
                              topic: str | None) -> bool:
        """Kafka's rule: the broker's `remote.log.storage.system.enable`, the topic's
        `remote.storage.enable`, and neither a compacted topic nor an internal one."""
        return bool(remote_storage_system_enable and config["remote.storage.enable"]
                    and "compact" not in config["cleanup.policy"]
                    and topic not in _NEVER_TIERED_TOPICS)

    @property
    def remote_log_enabled(self) -> bool:
        """Whether this log is tiered (set by the LogManager from the broker and topic
        configs, see `is_remote_log_enabled`)."""
        return self._remote_log_enabled

    @remote_log_enabled.setter
    def remote_log_enabled(self, value: bool) -> None:
        with self._lock:
            self._remote_log_enabled = bool(value)

    @property
    def remote_log_copy_disabled(self) -> bool:
        """The topic's `remote.log.copy.disable` (KIP-950): the tier stays readable."""
        return bool(self.config["remote.log.copy.disable"])

    def _remote_log_enabled_and_copy_enabled(self) -> bool:
        return self._remote_log_enabled and not self.remote_log_copy_disabled

    def update_config(self, config: TopicConfig) -> None:
        """Applies a new topic config (later rolls, retention and tiering use it). Indexes
        of existing segments keep their size until the next roll; `remote_log_enabled` is
        recomputed from the topic config alone (the LogManager, which knows the broker
        config, sets it afterwards)."""
        if not isinstance(config, TopicConfig):
            raise TypeError(f"update_config needs a TopicConfig, got {type(config).__name__}")
        with self._lock:
            self.config = config
            self._segment_bytes = config["segment.bytes"]
            self._segment_ms = config["segment.ms"]
            self._segment_jitter_ms = config["segment.jitter.ms"]
            self._remote_log_enabled = self.is_remote_log_enabled(True, config, self.topic)

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, directory, *, config: TopicConfig | Mapping[str, Any] | None = None,
             segment_bytes: int | None = None, segment_ms: int | None = None,
             index_interval_bytes: int | None = None, segment_index_bytes: int | None = None,
             recovery_point: int = 0, clean_shutdown: bool = False,
             topic_id: Uuid | str | None = None, log_start_offset: int | None = None,
             remote_log_enabled: bool | None = None,
             clock: Callable[[], int] | None = None) -> UnifiedLog:
        """Loads (or creates) the partition directory and recovers it (see the module notes).

        `config` is the topic config (a TopicConfig, or topic overrides under Kafka's names
        resolved against Kafka's broker defaults; default: the defaults). The keyword
        arguments `segment_bytes`, `segment_ms`, `index_interval_bytes` and
        `segment_index_bytes` override segment.bytes, segment.ms, index.interval.bytes and
        segment.index.bytes. `recovery_point` is the first offset not known to be flushed;
        `clean_shutdown` skips the scan when every index passes its sanity check; `topic_id`
        (a Uuid or its string) is written to `partition.metadata`; `log_start_offset`
        (checkpointed by the caller) is kept even below the first segment's base offset, tiered
        or not (the start of a tiered log may lie in the remote tier; a log opened with
        tiering off keeps it for when tiering is back); without it the log starts at its
        first segment, or at 0 when tiered (as Kafka's, until the RemoteLogManager raises it);
        `remote_log_enabled` defaults to the topic's `remote.storage.enable` (see
        `is_remote_log_enabled`); `clock` gives now in ms (segment times, retention).

        Raises:
            ConfigError (a ValueError): a config out of range.
            ValueError: a topic id different from the one in `partition.metadata`.
            CorruptCheckpointError: an unreadable `leader-epoch-checkpoint`.
        """
        config = _resolve_config(config, {"segment.bytes": segment_bytes,
                                          "segment.ms": segment_ms,
                                          "index.interval.bytes": index_interval_bytes,
                                          "segment.index.bytes": segment_index_bytes})
        self = cls(directory, config=config, recovery_point=recovery_point,
                   clock=clock or _now_ms)
        self._remote_log_enabled = (self.is_remote_log_enabled(True, config, self.topic)
                                    if remote_log_enabled is None else bool(remote_log_enabled))
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._load(clean_shutdown, log_start_offset, topic_id)
        except BaseException:
            self._close_segments()
            raise
        return self

    def _load(self, clean_shutdown: bool, log_start_offset: int | None, topic_id) -> None:
        if topic_id is not None:
            self._write_topic_id(topic_id)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT_FILE))
        self._remove_temporary_files()
        self._complete_swaps()
        bases = self._segment_bases()
        missing_index = {b for b in bases
                         if not all((self.dir / segment_file_name(b, s)).exists()
                                    for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX))}
        for base in bases:
            self._add_segment(self._open_segment(base))
        if not self._segments:
            start = 0 if log_start_offset is None else int(log_start_offset)
            self._add_segment(self._create_segment(start))
        recovered = self._recover(clean_shutdown, missing_index)
        self.active_segment.resize_indexes()
        first = self._segments[0].base_offset
        if log_start_offset is not None:
            # A checkpointed start is kept even below the first local segment, whatever
            # `remote_log_enabled` is now (Kafka's LogLoader raises it for an untiered log):
            # a tiered log opened with tiering off must not forget the remote offsets it
            # still holds, or they would be deleted as a log start breach once tiering is
            # back. An untiered log reads from its local start in any case.
            self._log_start_offset = int(log_start_offset)
        else:
            # A tiered log without a checkpoint begins at 0 (its start may lie in the
            # remote tier) until the RemoteLogManager raises it, as Kafka's.
            self._log_start_offset = 0 if self._remote_log_enabled else first
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
        # Kafka's LogLoader: after a clean shutdown with nothing recovered, everything up to
        # the log end is known to be flushed.
        if clean_shutdown and not recovered:
            self.recovery_point = self.log_end_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.leader_epoch_cache.flush()  # an empty cache still gets "0\n0\n", as Kafka's
        self._remove_stray_snapshots()
        self._rebuild_producer_state(recovered)

    def _write_topic_id(self, topic_id) -> None:
        if not isinstance(topic_id, Uuid):
            topic_id = Uuid.from_string(str(topic_id))
        if self.partition_metadata.exists():
            existing = self.partition_metadata.read().topic_id
            if existing != topic_id:
                raise ValueError(f"topic id {topic_id} differs from {existing} recorded in "
                                 f"{self.partition_metadata.file}")
            return
        self.partition_metadata.write(topic_id)

    def _remove_temporary_files(self) -> None:
        for path in sorted(self.dir.iterdir()):
            name = path.name
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                log.info("Deleting leftover file %s", path)
                path.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                log.info("Deleting leftover index swap file %s (rebuilt from the log)", path)
                path.unlink(missing_ok=True)

    def _complete_swaps(self) -> None:
        """A `.log.swap` replaces the segments whose base offsets it covers (Kafka's
        completion of an interrupted compaction or split); its indexes are rebuilt."""
        for path in sorted(self.dir.glob("*" + LOG_SUFFIX + SWAP_SUFFIX)):
            base = int(path.name[:20])
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                headers = np.empty(0, dtype=_records.BATCH_HEADER_DTYPE)
                if size:
                    with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
                        view = memoryview(m)
                        try:
                            headers = _records.scan(view, False)[0].copy()
                        finally:
                            view.release()
            next_offset = int(headers["last_offset"][-1]) + 1 if len(headers) else base
            for other in self._segment_bases():
                if base <= other < next_offset or other == base:
                    self._delete_segment_files(other)
            for suffix in _INDEX_SUFFIXES:
                (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
            os.replace(path, self.dir / segment_file_name(base, LOG_SUFFIX))
            log.info("Completed swap of %s: segments in [%d, %d) replaced", path, base,
                     next_offset)

    def _segment_bases(self) -> list[int]:
        bases, orphans = set(), []
        for path in self.dir.iterdir():
            m = _SEGMENT_FILE.match(path.name)
            if m is None:
                continue
            if m.group(2) == LOG_SUFFIX:
                bases.add(int(m.group(1)))
            else:
                orphans.append(path)
        for path in orphans:
            if int(path.name[:20]) not in bases:
                log.info("Deleting index file %s without a log file", path)
                path.unlink(missing_ok=True)
        return sorted(bases)

    def _delete_segment_files(self, base: int) -> None:
        for suffix in (LOG_SUFFIX, *_INDEX_SUFFIXES):
            (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)

    def _random_segment_jitter(self) -> int:
        """Kafka's randomSegmentJitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        if self._segment_jitter_ms <= 0:
            return 0
        return _jitter_random.randrange(min(self._segment_jitter_ms, self._segment_ms))

    def _open_segment(self, base: int) -> LogSegment:
        self._created_ms[base] = self._clock()
        self._roll_jitter_ms[base] = self._random_segment_jitter()
        return LogSegment.open(self.dir, base, index_interval_bytes=self.index_interval_bytes,
                               max_index_size=self.segment_index_bytes)

    def _create_segment(self, base: int) -> LogSegment:
        # Stale index files of a segment never written are replaced (Kafka does the same).
        for suffix in _INDEX_SUFFIXES:
            (self.dir / segment_file_name(base, suffix)).unlink(missing_ok=True)
        self._created_ms[base] = self._clock()
        self._roll_jitter_ms[base] = self._random_segment_jitter()
        return LogSegment.create(self.dir, base, index_interval_bytes=self.index_interval_bytes,
                                 max_index_size=self.segment_index_bytes)

    def _add_segment(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        self._bases.insert(i, segment.base_offset)
        self._segments.insert(i, segment)

    def _remove_segment(self, segment: LogSegment) -> None:
        i = self._segments.index(segment)
        del self._segments[i]
        del self._bases[i]
        self._rolling_ts.pop(segment.base_offset, None)
        self._created_ms.pop(segment.base_offset, None)
        self._roll_jitter_ms.pop(segment.base_offset, None)

    @staticmethod
    def _indexes_sane(segment: LogSegment) -> bool:
        try:
            segment.offset_index.sanity_check()
            segment.time_index.sanity_check()
            if segment.txn_index.file is not None and Path(segment.txn_index.file).exists():
                segment.txn_index.sanity_check()
        except CorruptIndexError as exc:
            log.warning("Found a corrupt index of %s, rebuilding it: %s", segment, exc)
            return False
        return True

    def _recover(self, clean_shutdown: bool, missing_index: set[int]) -> set[int]:
        """Recovers what needs it; returns the base offsets of the segments recovered (their
        transaction indexes were reset and are rebuilt with the producer state)."""
        # The segment holding the recovery point and every later one, unless clean.
        holder = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        assigner = _EpochAssigner(self.leader_epoch_cache)
        recovered: set[int] = set()
        for i, segment in enumerate(list(self._segments)):
            needs = segment.base_offset in missing_index or not self._indexes_sane(segment)
            if not clean_shutdown and i >= holder:
                needs = True
            if not needs:
                continue
            truncated = segment.recover(assigner)
            recovered.add(segment.base_offset)
            if truncated:
                self._drop_after(segment, truncated)
                break
        return recovered

    # -- producer state --------------------------------------------------------------------

    def _remove_stray_snapshots(self) -> None:
        """Kafka's removeStraySnapshots: a snapshot not named by a segment's base offset is
        kept only if it is the latest such one and above every base offset (the snapshot
        a clean shutdown wrote at the log end)."""
        bases = set(self._bases)
        strays = [(offset, path) for offset, path in self._producer_state.snapshot_files()
                  if offset not in bases]
        keep = strays[-1][0] if strays and strays[-1][0] > self._bases[-1] else None
        for offset, path in strays:
            if offset != keep:
                log.info("Deleting stray producer snapshot %s of log %s", path.name, self.dir)
                path.unlink(missing_ok=True)

    def _rebuild_producer_state(self, rewrite_txn_index: set[int]) -> None:
        """Kafka's rebuildProducerState: snapshots above the log end are deleted; the state
        is loaded from the latest readable snapshot at or below the first segment in
        `rewrite_txn_index` (else below the log end) and the batches after it are replayed.
        The segments in `rewrite_txn_index` get their aborted transactions re-appended to
        their (reset) transaction indexes. A damaged snapshot is deleted with a warning and
        an older one is tried; with none, the replay starts at the first segment."""
        end = self.log_end_offset
        state = self._producer_state
        state.delete_snapshots_after(end)
        limit = min(rewrite_txn_index) if rewrite_txn_index else end
        first = self._segments[0].base_offset
        state.reset(first)
        for offset, path in reversed(state.snapshot_files()):
            if offset > limit or offset < first:
                continue
            try:
                state.load_snapshot(path)
                break
            except CorruptSnapshotError as exc:
                log.warning("Deleting unreadable producer snapshot %s of log %s: %s", path,
                            self.dir, exc)
                path.unlink(missing_ok=True)
        start = state.map_end_offset
        if start >= end:
            return
        i = max(0, bisect.bisect_right(self._bases, start) - 1)
        for segment in self._segments[i:]:
            if segment.size_in_bytes == 0:
                continue
            info = segment.read(max(start, segment.base_offset), segment.size_in_bytes)
            if info is None or not info.records.nbytes:
                continue
            headers, _ = _records.scan(info.records, False)
            headers = headers[headers["base_offset"] >= start]
            target = segment if segment.base_offset in rewrite_txn_index else None
            self._apply_producer_batches(info.records, headers, target)

    def _apply_producer_batches(self, data, headers: np.ndarray,
                                segment: LogSegment | None) -> None:
        """Updates the producer state with appended batches; aborted transactions go to
        `segment`'s transaction index when a segment is given."""
        if not len(headers):
            return
        ids = headers["producer_id"]
        # No idempotent/transactional batch: the common case, kept to ~0.2 us per append.
        if (ids.item(0) if len(ids) == 1 else ids.max()) < 0:
            state = self._producer_state
            state.map_end_offset = max(state.map_end_offset, int(headers["last_offset"][-1]) + 1)
            return
        apply_batches(self._producer_state, data, headers,
                      None if segment is None else segment.txn_index.append)

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producer_state

    def producer_snapshot_file(self, offset: int) -> Path | None:
        """The producer snapshot named by exactly `offset` (written when the segment
        starting there was rolled), None if there is none."""
        path = snapshot_file(self.dir, offset)
        return path if path.exists() else None

    def take_producer_snapshot(self) -> Path:
        """Writes (fsynced) the producer snapshot at the log end offset."""
        with self._lock:
            self._require_open("take_producer_snapshot")
            self._producer_state.map_end_offset = self.log_end_offset
            return self._producer_state.take_snapshot()

    def _drop_after(self, segment: LogSegment, truncated: int) -> None:
        """Deletes every segment after `segment` (recovery truncated it), logging what."""
        later = self._segments[self._segments.index(segment) + 1:]
        dropped = [f"{s.log_file.name} (offsets [{s.base_offset}, {s.next_offset() - 1}], "
                   f"{s.size_in_bytes} bytes)" for s in later]
        log.warning("Recovery of %s truncated %d bytes at offset %d; deleting %d later "
                    "segment(s) after the corruption point: %s", segment.log_file, truncated,
                    segment.next_offset(), len(later), ", ".join(dropped) or "none")
        for s in later:
            self._remove_segment(s)
            s.delete()

    # -- properties ------------------------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        """The first offset a consumer may fetch; below `local_log_start_offset` when the
        log is tiered and older segments live only in the remote tier."""
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset readable from the local segments (Kafka's localLogStartOffset):
        the log start offset or the first segment's base offset, whichever is higher."""
        with self._lock:
            return max(self._log_start_offset, self._segments[0].base_offset)

    @property
    def highest_offset_in_remote_storage(self) -> int:
        """The last offset copied to the remote tier (-1 while nothing is); local segments
        above it are never deleted while tiering with copy enabled."""
        return self._highest_offset_in_remote_storage

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Raises `highest_offset_in_remote_storage` to `offset` (never lowers it). Ignored,
        with a warning, when the log is not tiered (Kafka's rule)."""
        with self._lock:
            if not self._remote_log_enabled:
                log.warning("Not updating the highest offset in remote storage of %s to %d: "
                            "remote storage is not enabled for it (current %d)", self.dir,
                            offset, self._highest_offset_in_remote_storage)
            elif offset > self._highest_offset_in_remote_storage:
                self._highest_offset_in_remote_storage = int(offset)

    @property
    def truncation_epoch(self) -> int:
        """A counter bumped by every `truncate_to` that drops offsets. A truncation lowers
        `highest_offset_in_remote_storage` to below the new log end offset, so that offsets
        appended afterwards count as untiered; the tiering (which keeps its own copy
        position) must notice the counter change and re-initialise from the remote
        metadata, as Kafka's RemoteLogManager does when leadership changes after a
        truncation."""
        return self._truncation_epoch

    def _after_truncation(self) -> None:
        # Offsets >= the new log end (a batch boundary, at or below the truncation offset)
        # will be new data: none of it is in the remote tier, whatever the remote tier holds
        # at those offsets (copied before the truncation).
        self._highest_offset_in_remote_storage = min(self._highest_offset_in_remote_storage,
                                                     self.log_end_offset - 1)
        self._truncation_epoch += 1

    @property
    def high_watermark(self) -> int:
        """The log end offset: this engine keeps one replica, so every appended offset is
        in the whole ISR as soon as it is appended (Kafka's single-replica high watermark).
        Flushing is not required, as in Kafka (acks do not wait for fsync)."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest ongoing transaction, else the high watermark
        (Kafka's LSO: read_committed fetches and tiering stop below it)."""
        with self._lock:
            hw = self.high_watermark
            first = self._producer_state.first_unstable_offset()
            return hw if first is None else min(first, hw)

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            return self.active_segment.next_offset()

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size_in_bytes for s in self._segments)

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"{what} on closed log {self.dir}")

    # -- appending -------------------------------------------------------------------------

    def _validate(self, records) -> tuple[bytes | bytearray | memoryview, np.ndarray]:
        # No copy of the input: the leader's offsets and epoch are assigned in the scan rows
        # and written from them (LogSegment.append), never stamped into the caller's bytes.
        if type(records) is not bytes and type(records) is not bytearray:
            records = memoryview(records).cast("B")
        size = len(records)
        if not size:
            raise InvalidRecordError(f"empty append to log {self.dir}")
        headers, valid, bad = _records.scan_for_append(records)
        if valid != size:
            raise InvalidRecordError(
                f"records appended to log {self.dir} end with a partial batch: "
                f"{size - valid} of {size} bytes", position=valid)
        if bad >= 0:
            row = headers[bad]
            if row["magic"] < _MIN_MAGIC:
                raise InvalidRecordError(
                    f"batch at byte {int(row['position'])} of an append to log {self.dir} has "
                    f"magic v{int(row['magic'])}: only v2 record batches can be appended",
                    position=int(row["position"]), offset=int(row["base_offset"]))
            raise CorruptRecordError(
                f"batch at byte {int(row['position'])} of an append to log {self.dir} has a "
                f"bad CRC (stored {int(row['crc']):#010x})", position=int(row["position"]),
                offset=int(row["base_offset"]))
        return records, headers

    def append_as_leader(self, records, leader_epoch: int) -> tuple[int, int]:
        """Validates v2 batches, assigns offsets from the log end, stamps `leader_epoch`,
        and appends them. Returns (first offset, last offset).

        `records` (any buffer) is not copied and not modified: offsets and epoch are written
        to the file from the scan rows. It must not change while the call runs.

        Raises:
            InvalidRecordError: empty, partial, or magic < 2 input.
            CorruptRecordError: a batch whose CRC does not match.
            ValueError: a negative leader epoch.
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
        data, headers = self._validate(records)
        with self._lock:
            if self._closed:
                self._require_open("append_as_leader")
            first, last = _records.assign_offsets(headers, self._segments[-1].next_offset(),
                                                  leader_epoch)
            self._append(data, headers, leader_epoch)
            return first, last

    def append_as_follower(self, records) -> tuple[int, int]:
        """Appends replicated v2 batches with their own offsets and leader epochs. Returns
        (first offset, last offset).

        Raises:
            InvalidOffsetError: the first offset is below the log end offset, or offsets do
                not increase from batch to batch.
            InvalidRecordError / CorruptRecordError: as for `append_as_leader`.
        """
        data, headers = self._validate(records)
        with self._lock:
            self._require_open("append_as_follower")
            end = self.log_end_offset
            first = int(headers["base_offset"][0])
            if first < end:
                raise InvalidOffsetError(
                    f"follower append to log {self.dir} starts at offset {first}, below the "
                    f"log end offset {end}", offset=first)
            if len(headers) > 1 and np.any(headers["base_offset"][1:]
                                           <= headers["last_offset"][:-1]):
                i = int(np.flatnonzero(headers["base_offset"][1:]
                                       <= headers["last_offset"][:-1])[0]) + 1
                raise InvalidOffsetError(
                    f"follower append to log {self.dir}: batch at byte "
                    f"{int(headers['position'][i])} starts at offset "
                    f"{int(headers['base_offset'][i])}, not above the previous batch's last "
                    f"offset {int(headers['last_offset'][i - 1])}",
                    position=int(headers["position"][i]),
                    offset=int(headers["base_offset"][i]))
            self._append(data, headers)
            return first, int(headers["last_offset"][-1])

    def _append(self, data: bytearray, headers: np.ndarray,
                leader_epoch: int | None = None) -> None:
        """Appends validated batches; `leader_epoch` is the one every batch was stamped with
        (a leader append), None when each keeps its own (a follower append)."""
        first, largest, max_ts, shallow, first_max_ts, size = _records.append_summary(headers)
        segment = self._segments[-1]
        reason = self._should_roll(segment, size, max_ts, largest)
        if reason is not None:
            new_base = max(first, segment.next_offset())
            log.info("Rolling log %s at offset %d: %s", self.dir, new_base, reason)
            segment = self._roll(new_base)
        cache = self.leader_epoch_cache
        if leader_epoch is None:
            _assign_epochs(cache, headers)
        else:  # one epoch for all the batches: the cache changes only when it rises
            latest = cache.latest_epoch
            if latest is None or leader_epoch > latest:
                cache.assign(leader_epoch, first)
        was_empty = segment.size_in_bytes == 0
        segment.append(largest, max_ts, shallow, data, headers)
        if was_empty:
            self._rolling_ts[segment.base_offset] = first_max_ts
        ids = headers["producer_id"]
        # No idempotent/transactional batch: the common case, one field read per append.
        if (ids.item(0) if len(ids) == 1 else ids.max()) < 0:
            state = self._producer_state
            if state.map_end_offset <= largest:
                state.map_end_offset = largest + 1
        else:
            apply_batches(self._producer_state, data, headers, segment.txn_index.append)

    def _rolling_timestamp(self, segment: LogSegment) -> int:
        ts = self._rolling_ts.get(segment.base_offset)
        if ts is None:
            first = segment.translate_offset(segment.base_offset)
            ts = _NO_TIMESTAMP if first is None else int(first["max_timestamp"])
            self._rolling_ts[segment.base_offset] = ts
        return ts

    def _should_roll(self, segment: LogSegment, size: int, max_ts: int,
                     largest: int) -> str | None:
        """Why the active `segment` must roll before this append, None if it need not.
        Runs on every append: attributes only, no config lookup."""
        current = segment.size_in_bytes
        if current > self._segment_bytes - size:
            return (f"size {current} + {size} incoming bytes exceeds "
                    f"segment.bytes {self._segment_bytes}")
        if segment.offset_index.is_full():
            return "offset index full"
        if segment.time_index.is_full():
            return "time index full"
        if not 0 <= largest - segment.base_offset <= INT32_MAX:
            return f"offset {largest} does not fit relative to base {segment.base_offset}"
        if current > 0:
            rolling = self._rolling_ts.get(segment.base_offset)
            if rolling is None:
                rolling = self._rolling_timestamp(segment)
            if rolling >= 0:
                waited = max_ts - rolling
            else:
                waited = self._clock() - self._created_ms.get(segment.base_offset,
                                                              self._clock())
            jitter = self._roll_jitter_ms.get(segment.base_offset, 0)
            if waited > self._segment_ms - jitter:
                return (f"{waited} ms since the segment's first batch exceeds segment.ms "
                        f"{self._segment_ms} minus its jitter {jitter} ms")
        return None

    def roll(self) -> LogSegment:
        """Starts a new active segment at the log end offset (no-op when the active segment
        is empty). Returns the active segment."""
        with self._lock:
            self._require_open("roll")
            return self._roll(self.log_end_offset)

    def _roll(self, new_base: int) -> LogSegment:
        active = self.active_segment
        if active.size_in_bytes == 0:
            if active.base_offset == new_base:
                return active
            self._remove_segment(active)
            active.delete()
        else:
            active.on_become_inactive_segment()
        segment = self._create_segment(new_base)
        self._add_segment(segment)
        # Kafka's roll: a producer snapshot named by the new segment's base offset, so that
        # recovery of a segment starts from the snapshot at its base (and the tiering copies
        # it with the rolled segment). Written without fsync; the next flush syncs it.
        self._producer_state.map_end_offset = new_base
        self._unsynced_snapshots.add(self._producer_state.take_snapshot(new_base, sync=False))
        return segment

    # -- reading ---------------------------------------------------------------------------

    def _out_of_range(self, offset: int, what: str) -> OffsetOutOfRangeError:
        start, end = self._log_start_offset, self.log_end_offset
        return OffsetOutOfRangeError(
            f"{what} offset {offset} of log {self.dir} is out of range: valid offsets are "
            f"[{start}, {end}] (log start offset, log end offset)", offset=offset,
            log_start_offset=start, log_end_offset=end)

    def _out_of_local_range(self, offset: int) -> OffsetOutOfRangeError:
        start, local, end = self._log_start_offset, self.local_log_start_offset, \
            self.log_end_offset
        tiered = (f"; offsets [{start}, {local}) are in the remote tier only"
                  if start < local else "")
        return OffsetOutOfRangeError(
            f"fetch offset {offset} of log {self.dir} is out of the local range "
            f"[{local}, {end}] (local log start offset, log end offset){tiered}",
            offset=offset, log_start_offset=local, log_end_offset=end)

    def read(self, offset: int, max_bytes: int,
             min_one_message: bool = True) -> tuple[memoryview, int]:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first batch
        whole even if larger when `min_one_message`), from one segment as Kafka does.

        Returns (zero-copy view, next fetch offset hint): the offset after the last batch
        returned, or `offset` when nothing is (at the log end, or `max_bytes` too small).

        Raises:
            OffsetOutOfRangeError: `offset` outside [local_log_start_offset,
                log_end_offset] (its `log_start_offset` is the local log start offset;
                offsets below it but not below `log_start_offset` are in the remote tier).
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self._require_open("read")
            end = self.log_end_offset
            if offset < self.local_log_start_offset or offset > end:
                raise self._out_of_local_range(offset)
            if offset == end:
                return memoryview(b""), offset
            i = max(0, bisect.bisect_right(self._bases, offset) - 1)
            for j in range(i, len(self._segments)):
                segment = self._segments[j]
                try:
                    info = segment.read(offset, max_bytes, min_one_message=min_one_message)
                except (CorruptRecordError, InvalidRecordError):
                    # Unframeable bytes where the lookup led: name the file and position.
                    self._diagnose_unreadable(segment, offset)
                    raise
                if info is not None:
                    view = info.records
                    if not view.nbytes:
                        if min_one_message:
                            # Nothing framed at the batch holding `offset`: damage, never
                            # an empty answer that would stall the consumer there.
                            self._diagnose_unreadable(segment, offset)
                        return view, offset
                    headers, _ = _records.scan(view, False)
                    return view, int(headers["last_offset"][-1]) + 1
                # No batch at or after `offset` in this segment: go on to the next one only
                # if the segment really ends below it (a gap between segments), never past
                # damage that hides the batches holding it.
                upper = self._bases[j + 1] if j + 1 < len(self._bases) else end
                if offset < upper:
                    self._diagnose_unreadable(segment, offset)
            return memoryview(b""), offset

    @staticmethod
    def _check_framing(segment: LogSegment, what: str, offset: int) -> np.ndarray:
        """The headers of the whole `.log` of `segment`; CorruptRecordError naming the file,
        byte position and offset where batches stop framing, if they do."""
        with open(segment.log_file, "rb") as f:
            data = f.read()
        try:
            headers, valid = _records.scan(data, False)
        except (CorruptRecordError, InvalidRecordError) as exc:
            valid = int(exc.position or 0)
            headers, _ = _records.scan(memoryview(data)[:valid], False)
        last = int(headers["last_offset"][-1]) if len(headers) else segment.base_offset - 1
        if valid < len(data):
            raise CorruptRecordError(
                f"log segment {segment.log_file} is damaged at byte {valid} of "
                f"{len(data)}: no whole batch frames there (last readable offset {last}); "
                f"{what} and the rest of the segment cannot be read (recovery from an "
                f"earlier recovery point truncates it there)", file=segment.log_file,
                position=valid, offset=max(offset, last + 1))
        return headers

    def _diagnose_unreadable(self, segment: LogSegment, offset: int) -> None:
        """Called when `segment` gave nothing for `offset` although it should hold it.
        Scans the whole `.log` (a rare path): raises CorruptRecordError at the first byte
        where batches stop framing, or CorruptIndexError when the `.log` frames but its
        offset index led the lookup astray. Returns when the segment truly has no batch
        at or after `offset` (offsets missing between segments)."""
        headers = self._check_framing(segment, f"fetch offset {offset}", offset)
        hit = np.flatnonzero(headers["last_offset"] >= offset)
        if len(hit):
            row = headers[hit[0]]
            raise CorruptIndexError(
                f"offset index {segment.offset_index.file} of log segment {segment.log_file} "
                f"is damaged: the batch holding offset {offset} is at byte "
                f"{int(row['position'])} but the lookup found nothing (entry for "
                f"{segment.offset_index.lookup(offset)}); delete the index to have it rebuilt",
                file=segment.offset_index.file, offset=offset)

    # -- flushing, closing -----------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsyncs the segments holding offsets in [recovery point, up_to) (default: the log
        end) and moves the recovery point to `up_to`."""
        with self._lock:
            self._require_open("flush")
            end = self.log_end_offset
            up_to = end if up_to is None else min(int(up_to), end)
            if up_to <= self.recovery_point:
                return
            for j, segment in enumerate(self._segments):
                next_base = self._bases[j + 1] if j + 1 < len(self._bases) else None
                if segment.base_offset < up_to and (next_base is None
                                                    or next_base > self.recovery_point):
                    segment.flush()
            self._sync_snapshots()
            self.recovery_point = up_to

    def _sync_snapshots(self) -> None:
        for path in sorted(self._unsynced_snapshots):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted with its segment, or by a truncation
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self._unsynced_snapshots:
            fsync_dir(self.dir)
        self._unsynced_snapshots.clear()

    def close(self) -> None:
        """Flushes, then closes every segment (final time-index entry, trimmed indexes).
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
                # Kafka's close: a snapshot at the log end spares the next start a replay.
                self._producer_state.map_end_offset = self.log_end_offset
                self._producer_state.take_snapshot()
            finally:
                self._close_segments()
                self._purge_deleted_files(everything=True)
                self._closed = True

    def _close_segments(self) -> None:
        for segment in self._segments:
            segment.close()

    # -- truncation, deletion --------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Drops every offset >= `offset` (follower truncation). Returns whether anything was
        dropped. Truncating below the log start offset empties the log and starts it at
        `offset`. The producer state is rebuilt from the latest snapshot at or below it.
        `highest_offset_in_remote_storage` drops below the new log end offset and
        `truncation_epoch` is bumped (see there)."""
        if offset < 0:
            raise ValueError(f"cannot truncate log {self.dir} to negative offset {offset}")
        with self._lock:
            self._require_open("truncate_to")
            if offset >= self.log_end_offset:
                return False
            log.info("Truncating log %s to offset %d (log end offset %d)", self.dir, offset,
                     self.log_end_offset)
            if offset < self._log_start_offset or offset <= self._segments[0].base_offset:
                self._truncate_fully_and_start_at(offset)
                return True
            for segment in [s for s in self._segments if s.base_offset >= offset]:
                self._remove_segment(segment)
                segment.delete()
            active = self.active_segment
            active.truncate_to(offset)
            self._rolling_ts.pop(active.base_offset, None)
            self.leader_epoch_cache.truncate_from_end(offset)
            self.recovery_point = min(self.recovery_point, offset)
            self._rebuild_producer_state(set())
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None = None,
                                    *, leader_epochs: Iterable[EpochEntry] | None = None,
                                    producer_snapshot: bytes | None = None) -> None:
        """Kafka's truncateFullyAndStartAt: every segment, producer snapshot and epoch entry
        goes, and the log starts again, empty, at `new_offset`, with the log start offset
        `log_start_offset` (default `new_offset`; below `new_offset` it marks offsets only
        the remote tier holds, and the local log start offset is `new_offset`).

        A follower built from the tier passes what the offsets below would have built:
        `leader_epochs` become the epoch cache (entries starting at or above `new_offset`
        dropped, the one covering the log start starting there), and the producer state is
        reloaded from `producer_snapshot`, the bytes of a snapshot taken at `new_offset`,
        stored as `<new_offset>.snapshot`. The recovery point moves to `new_offset`;
        `highest_offset_in_remote_storage` and `truncation_epoch` change as for
        `truncate_to`; then `log_start_offset_listener(self)` is called (the LogManager
        checkpoints the start at once).

        The epoch checkpoint and the snapshot are written before the new segment: a crash
        in between leaves no segment, and the log loads as an empty one at its checkpointed
        start, never as a log at `new_offset` without its producer state.

        Raises:
            ValueError: a negative `new_offset` or epoch entry, or `log_start_offset`
                outside [0, new_offset].
            CorruptSnapshotError: `producer_snapshot` does not decode (checked before
                anything changes).
        """
        new_offset = int(new_offset)
        start = new_offset if log_start_offset is None else int(log_start_offset)
        if new_offset < 0 or not 0 <= start <= new_offset:
            raise ValueError(f"cannot start log {self.dir} at offset {new_offset} with log "
                             f"start offset {start}: need 0 <= log start <= new offset")
        epochs = None
        if leader_epochs is not None:
            epochs = [EpochEntry(int(e), int(o)) for e, o in leader_epochs]
            bad = next((e for e in epochs if e.epoch < 0 or e.start_offset < 0), None)
            if bad is not None:
                raise ValueError(f"leader epoch entry {bad} for log {self.dir} is negative")
        snapshot_path = snapshot_file(self.dir, new_offset)
        if producer_snapshot is not None:
            producer_snapshot = bytes(producer_snapshot)
            decode_snapshot(producer_snapshot, file=str(snapshot_path))
        with self._lock:
            self._require_open("truncate_fully_and_start_at")
            log.info("Truncating log %s fully and starting it at offset %d (log start offset "
                     "%d, log end offset was %d)", self.dir, new_offset, start,
                     self.log_end_offset)
            self._truncate_fully_and_start_at(new_offset, start, epochs, producer_snapshot)
        listener = self.log_start_offset_listener
        if listener is not None:
            listener(self)

    def _truncate_fully_and_start_at(self, offset: int, log_start_offset: int | None = None,
                                     leader_epochs: list[EpochEntry] | None = None,
                                     producer_snapshot: bytes | None = None) -> None:
        start = offset if log_start_offset is None else log_start_offset
        for segment in list(self._segments):
            self._remove_segment(segment)
            segment.delete()
        self._producer_state.delete_snapshots_after(-1)
        cache = self.leader_epoch_cache
        cache.clear()
        if leader_epochs:
            cache.assign_entries(leader_epochs)
            cache.truncate_from_end(offset)
            cache.truncate_from_start(start)
        if producer_snapshot is not None:
            write_file_atomically(snapshot_file(self.dir, offset), producer_snapshot)
        self._add_segment(self._create_segment(offset))
        self._log_start_offset = start
        self.recovery_point = offset
        self._producer_state.reset(offset)
        if producer_snapshot is not None:
            self._rebuild_producer_state(set())
        self._after_truncation()

    def maybe_increment_log_start_offset(self, new_log_start_offset: int,
                                         reason: LogStartOffsetIncrementReason | str
                                         = LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION
                                         ) -> bool:
        """Raises the log start offset (Kafka's maybeIncrementLogStartOffset): offsets below
        it can no longer be fetched, the epoch cache drops what is before it, and the local
        segments wholly below it become deletable (`delete_old_segments`). For a tiered log
        the local start follows when the new start passes it. Returns whether it moved.

        Raises:
            OffsetOutOfRangeError: `new_log_start_offset` above the high watermark.
        """
        with self._lock:
            self._require_open("maybe_increment_log_start_offset")
            if new_log_start_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset of {self.dir} to "
                    f"{new_log_start_offset}: it is above the high watermark "
                    f"{self.high_watermark}", offset=new_log_start_offset,
                    log_start_offset=self._log_start_offset,
                    log_end_offset=self.log_end_offset)
            if new_log_start_offset <= self._log_start_offset:
                return False
            why = reason.value if isinstance(reason, LogStartOffsetIncrementReason) else reason
            log.info("Incrementing the log start offset of %s from %d to %d (%s)", self.dir,
                     self._log_start_offset, new_log_start_offset, why)
            self._log_start_offset = int(new_log_start_offset)
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            self.recovery_point = max(self.recovery_point, min(self._log_start_offset,
                                                               self.log_end_offset))
            if self._producer_state.map_end_offset < self._log_start_offset:
                self._producer_state.reset(self._log_start_offset)
            return True

    def delete_records(self, new_log_start_offset: int) -> int:
        """Moves the log start offset up (Kafka's DeleteRecords, see
        `maybe_increment_log_start_offset`). Returns the log start offset. When it moved,
        `log_start_offset_listener(self)` is called afterwards (the LogManager checkpoints
        the new start at once, so that a crash cannot lose a deletion already answered);
        an error it raises is the caller's.

        Raises:
            OffsetOutOfRangeError: `new_log_start_offset` above the log end offset.
        """
        with self._lock:
            self._require_open("delete_records")
            if new_log_start_offset > self.log_end_offset:
                raise self._out_of_range(new_log_start_offset, "delete-records")
            moved = self.maybe_increment_log_start_offset(
                new_log_start_offset, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
            start = self._log_start_offset
        listener = self.log_start_offset_listener
        if moved and listener is not None:
            # Outside the lock: the listener (the LogManager's checkpoint) reads other logs.
            listener(self)
        return start

    # -- retention -------------------------------------------------------------------------

    def _may_delete_locally(self, segment: LogSegment, next_segment: LogSegment | None) -> bool:
        """THE rule for removing a local segment (Kafka's isSegmentEligibleForDeletion and
        its high-watermark guard): never one holding offsets at or above the high watermark;
        and when the log is tiered with copy enabled, only one whose last offset is already
        in the remote tier (<= highest_offset_in_remote_storage), or wholly below the log
        start offset. Every local deletion goes through here."""
        upper_bound = (next_segment.base_offset if next_segment is not None
                       else self.log_end_offset)
        if self.high_watermark < upper_bound:
            return False
        if not self._remote_log_enabled_and_copy_enabled():
            return True
        tiered = upper_bound > 0 and upper_bound - 1 <= self._highest_offset_in_remote_storage
        passed = next_segment is not None and self._log_start_offset >= next_segment.base_offset
        return tiered or passed

    def delete_old_segments(self) -> int:
        """Kafka's deleteOldSegments: with `cleanup.policy` containing delete, the segments
        breaching retention.ms (by their largest timestamp) or retention.bytes, and in any
        case those below the log start offset. A tiered log with copy enabled uses
        local.retention.ms / local.retention.bytes (-2: the total ones) and deletes only
        tiered segments, moving the local log start offset, not the log start offset; its
        active segment is rolled once it breaches local retention, so that it can be tiered
        and deleted later. Returns how many segments were deleted."""
        with self._lock:
            self._require_open("delete_old_segments")
            self._purge_deleted_files()
            if "delete" in self.config["cleanup.policy"]:
                return (self._delete_log_start_offset_breached_segments()
                        + self._delete_retention_size_breached_segments()
                        + self._delete_retention_ms_breached_segments())
            return self._delete_log_start_offset_breached_segments()

    def _delete_retention_ms_breached_segments(self) -> int:
        retention_ms = (self.config.local_retention_ms
                        if self._remote_log_enabled_and_copy_enabled()
                        else self.config["retention.ms"])
        if retention_ms < 0:
            return 0
        now = self._clock()
        return self._delete_old_segments(
            lambda segment, _next: now - segment.largest_timestamp > retention_ms,
            f"retention time {retention_ms} ms breach")

    def _delete_retention_size_breached_segments(self) -> int:
        retention_bytes = (self.config.local_retention_bytes
                           if self._remote_log_enabled_and_copy_enabled()
                           else self.config["retention.bytes"])
        size = self.size_in_bytes
        if retention_bytes < 0 or size < retention_bytes:
            return 0
        excess = [size - retention_bytes]

        def breached(segment: LogSegment, _next) -> bool:
            if excess[0] - segment.size_in_bytes < 0:
                return False
            excess[0] -= segment.size_in_bytes
            return True

        return self._delete_old_segments(breached,
                                         f"retention size {retention_bytes} bytes breach")

    def _delete_log_start_offset_breached_segments(self) -> int:
        start = (self.local_log_start_offset if self._remote_log_enabled_and_copy_enabled()
                 else self._log_start_offset)
        return self._delete_old_segments(
            lambda segment, next_segment: next_segment is not None
            and next_segment.base_offset <= start, f"log start offset {start} breach")

    def _delete_old_segments(self, predicate, reason: str) -> int:
        """Kafka's deletableSegments + deleteSegments: the oldest segments passing
        `predicate` and `_may_delete_locally`, up to the first that does not."""
        deletable, should_roll = [], False
        tiered = self._remote_log_enabled_and_copy_enabled()
        for j, segment in enumerate(self._segments):
            next_segment = self._segments[j + 1] if j + 1 < len(self._segments) else None
            upper_bound = (next_segment.base_offset if next_segment is not None
                           else self.log_end_offset)
            breached = self.high_watermark >= upper_bound and predicate(segment, next_segment)
            if breached and tiered and next_segment is None and segment.size_in_bytes > 0:
                should_roll = True  # Kafka's RollAndOffloadActiveSegment
            if (breached and not (next_segment is None and segment.size_in_bytes == 0)
                    and self._may_delete_locally(segment, next_segment)):
                deletable.append(segment)
            else:
                break
        if should_roll:
            log.info("Rolling the active segment of %s: it breaches the local retention (%s) "
                     "and must be tiered before it can go", self.dir, reason)
            self._roll(self.log_end_offset)
        return self._delete_segment_list(deletable, reason)

    def _delete_segment_list(self, deletable: list[LogSegment], reason: str) -> int:
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            # At least one segment must remain: roll an empty one first (Kafka's rule).
            self._roll(self.log_end_offset)
        for segment in deletable:
            log.info("Deleting segment %s (offsets [%d, %d], %d bytes, largest timestamp "
                     "%d) of log %s: %s", segment.log_file.name, segment.base_offset,
                     segment.next_offset() - 1, segment.size_in_bytes,
                     segment.max_timestamp_so_far, self.dir, reason)
            self._remove_segment(segment)
            self._delete_segment_async(segment)
        self._purge_deleted_files()
        first = self._segments[0].base_offset
        if not self._remote_log_enabled_and_copy_enabled() and first > self._log_start_offset:
            self.maybe_increment_log_start_offset(
                first, LogStartOffsetIncrementReason.SEGMENT_DELETION)
        self.recovery_point = max(self.recovery_point, first)
        return len(deletable)

    def _delete_segment_async(self, segment: LogSegment) -> None:
        """Kafka's asynchronous delete: the segment's files and the producer snapshot named
        by its base offset are renamed to `<name>.deleted` at once (a crash leaves names
        the next load removes) and unlinked `file.delete.delay.ms` later, by a later
        retention pass or `close` (reads holding views of it stay valid meanwhile)."""
        files = [segment.log_file, segment.offset_index.file, segment.time_index.file,
                 segment.txn_index.file, snapshot_file(self.dir, segment.base_offset)]
        renamed = []
        for path in files:
            if path is None:
                continue
            target = Path(str(path) + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        segment.delete()  # closes its handles; nothing is left under the old names
        self._pending_deletes.append((self._clock() + self.config["file.delete.delay.ms"],
                                      renamed))

    def _purge_deleted_files(self, everything: bool = False) -> None:
        now = self._clock()
        keep = []
        for due, files in self._pending_deletes:
            if everything or due <= now:
                for path in files:
                    path.unlink(missing_ok=True)
            else:
                keep.append((due, files))
        self._pending_deletes = keep

    def delete_log_start_offset_breached_segments(self) -> int:
        """Deletes the segments whose offsets are all below the log start offset (the local
        log start offset for a tiered log with copy enabled)."""
        with self._lock:
            self._require_open("delete_log_start_offset_breached_segments")
            return self._delete_log_start_offset_breached_segments()

    def delete_segments(self,
                        predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Deletes the oldest segments for which `predicate(segment, next_segment_or_None)`
        and `_may_delete_locally` hold, stopping at the first for which they do not (Kafka's
        deletableSegments). If every segment qualifies, the log rolls first so that an
        (empty) active segment remains. The log start offset moves up to the first remaining
        segment (the local log start offset only, for a tiered log with copy enabled).
        Returns how many segments were deleted."""
        with self._lock:
            self._require_open("delete_segments")
            return self._delete_old_segments(predicate, "deletion requested")

    # -- lookups for tiering and fetches ---------------------------------------------------

    def collect_aborted_transactions(self, start_offset: int,
                                     upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions of the local segments overlapping
        [start_offset, upper_bound_offset) (Kafka's collectAbortedTransactions): from the
        segment holding `start_offset` on, stopping at the first complete search. Segments
        starting at or after the upper bound are searched too: a transaction's abort is
        indexed in the segment of its marker, which may come any number of rolls later."""
        with self._lock:
            self._require_open("collect_aborted_transactions")
            i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
            found: list[AbortedTxn] = []
            for segment in self._segments[i:]:
                result = segment.txn_index.collect_aborted_txns(start_offset,
                                                                upper_bound_offset)
                found.extend(result.aborted_transactions)
                if result.is_complete:
                    break
            return found

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int | None] | None:
        """(offset, timestamp, leader epoch or None) for a ListOffsets lookup over the local
        log (Kafka's fetchOffsetByTimestamp): a timestamp gives the first record at or after
        it from the local log start (None if there is none); the special values give
        -2 EARLIEST (log start offset), -4 EARLIEST_LOCAL (local log start offset),
        -1 LATEST (log end offset), -5 LATEST_TIERED (highest offset in remote storage;
        -1 without tiering), -3 MAX_TIMESTAMP (the batch holding the largest timestamp),
        each with the leader epoch of that offset (timestamp -1)."""
        with self._lock:
            self._require_open("fetch_offset_by_timestamp")
            cache = self.leader_epoch_cache
            if timestamp == EARLIEST_TIMESTAMP:
                # An untiered log cannot serve offsets below its local start.
                start = (self._log_start_offset if self._remote_log_enabled
                         else self.local_log_start_offset)
                return start, _NO_TIMESTAMP, cache.epoch_for_offset(start)
            if timestamp == EARLIEST_LOCAL_TIMESTAMP:
                start = self.local_log_start_offset
                return start, _NO_TIMESTAMP, cache.epoch_for_offset(start)
            if timestamp == LATEST_TIMESTAMP:
                return self.log_end_offset, _NO_TIMESTAMP, cache.latest_epoch
            if timestamp == LATEST_TIERED_TIMESTAMP:
                highest = self._highest_offset_in_remote_storage if self._remote_log_enabled \
                    else -1
                epoch = cache.epoch_for_offset(highest) if highest >= 0 else None
                return highest, _NO_TIMESTAMP, epoch
            if timestamp == MAX_TIMESTAMP:
                return self._max_timestamp_and_offset()
            if timestamp < 0:
                raise ValueError(f"unknown special timestamp {timestamp} for a lookup in log "
                                 f"{self.dir}")
            start = self.local_log_start_offset
            for segment in self._segments:
                if segment.size_in_bytes and segment.largest_timestamp >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, start)
                    if found is not None:
                        return found.offset, found.timestamp, found.leader_epoch
                    # The segment's largest timestamp says the record is here: a miss is
                    # damage hiding it, never a reason to answer from a later segment.
                    if segment.next_offset() > start:
                        self._check_framing(segment, f"timestamp lookup {timestamp}", start)
            return None

    def _max_timestamp_and_offset(self) -> tuple[int, int, int | None] | None:
        """ListOffsets MAX_TIMESTAMP: the first record carrying the largest timestamp, in
        the first batch that carries it (Kafka answers with that record's offset, not the
        batch's), from the local log."""
        best = max(self._segments, key=lambda s: s.max_timestamp_so_far)
        max_ts = best.max_timestamp_so_far
        if max_ts < 0:
            return None
        offset = best.shallow_offset_of_max_timestamp_so_far
        hit = best.translate_offset(offset)
        if hit is None:
            return offset, max_ts, None
        epoch = int(hit["partition_leader_epoch"])
        info = best.read(int(hit["base_offset"]), int(hit["size"]))
        if info is not None and info.records.nbytes:
            cols = MemoryRecords(info.records).decode_columns(0, 1, include_control=False)
            carrying = np.flatnonzero(cols.timestamp == max_ts)
            if len(carrying):
                offset = int(cols.offset[carrying[0]])
            elif cols.num_records:  # LogAppendTime: every record carries the batch's time
                offset = int(cols.offset[0])
        return offset, max_ts, epoch if epoch >= 0 else None

    def epoch_entries_in_range(self, start_offset: int, end_offset: int):
        """The epoch entries covering [start_offset, end_offset) (Kafka's
        epochEntriesInRange), as the tiering records them with a segment."""
        return self.leader_epoch_cache.epoch_entries_in_range(start_offset, end_offset)

    def leader_epoch_checkpoint_text(self, up_to_offset: int) -> bytes:
        """The `leader-epoch-checkpoint` text of the entries starting below
        `up_to_offset` (what Kafka copies as a segment's leader-epoch index)."""
        return self.leader_epoch_cache.checkpoint_text(up_to_offset)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"UnifiedLog(dir={str(self.dir)!r}, log_start_offset={self._log_start_offset}, "
                f"log_end_offset={self.log_end_offset if not self._closed else '?'}, "
                f"segments={len(self._segments)})")
