"""The local log of one partition directory (the local part of Kafka's `UnifiedLog`).

A partition directory holds segments (see `engine.log.segment`), `leader-epoch-checkpoint`
and, when the topic id is known, `partition.metadata`. `UnifiedLog` composes, as Kafka's
does, objects that each own one part and are called under its one lock:

- `LocalLog` (engine.log.local_log): the segment list, rolling, reads and flushes;
- `LogLoader` (engine.log.log_loader): loading and recovery, run once by `open`;
- `LogRetention` (engine.log.log_retention): retention by time, size and log start, with
  the tiering rules;
- the batch checks of an append (engine.log.log_validator, Kafka's LogValidator).

It keeps what belongs to the whole partition (as Kafka's UnifiedLog): the log start
offset, the leader epoch cache (assigned for each v2 batch whose epoch is above the latest,
checkpointed at once), the producer state (markers complete transactions, aborts go to the
segment's `.txnindex`; `<base>.snapshot` is written at each roll, fsynced by the next
flush, and at close), truncation, and the tiering state: `remote_log_enabled`,
`highest_offset_in_remote_storage`, a log start offset that may lie below the first local
segment (`local_log_start_offset`). `truncate_fully_and_start_at` restarts the log empty at
an offset with its log start below it (a follower built from the tier). The high watermark
is the log end offset (one replica); the last stable offset is the first offset of the
earliest open transaction, else the high watermark.

Not done here: LOG_APPEND_TIME rewriting on leader appends (batches keep their
timestamps), sequence/epoch validation of producer appends (no duplicate detection), and
producer expiry (producer.id.expiration.ms). Truncation and recovery delete segments at
once; retention defers it.

Thread-safety: every public method serializes on one lock. Views returned by `read` follow
`LogSegment.read`'s rules (invalid after truncation or deletion of their segment).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from engine._native import records as _records
from engine.common import Uuid, write_file_atomically
from engine.config import BrokerConfig, TopicConfig
from engine.errors import (
    OffsetOutOfRangeError,
)
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile, PartitionMetadataFile
from engine.log.leader_epoch import LeaderEpochFileCache
from engine.log.local_log import _NO_TIMESTAMP, LocalLog
from engine.log.log_loader import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LogLoader,
    assign_epochs,
    rebuild_producer_state,
)
from engine.log.log_retention import LogRetention, LogStartOffsetIncrementReason
from engine.log.log_validator import validate_batches, validate_follower_offsets
from engine.log.producer_state import (
    ProducerStateManager,
    apply_batches,
    decode_snapshot,
    snapshot_file,
)
from engine.log.segment import LogSegment
from engine.log.transaction_index import AbortedTxn

__all__ = ["LEADER_EPOCH_CHECKPOINT_FILE", "PARTITION_METADATA_FILE", "LocalLog", "LogLoader",
           "LogRetention", "LogStartOffsetIncrementReason", "UnifiedLog"]

log = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
#: ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
#: Topics Kafka never tiers (internal topics, the RLMM's topic, the KRaft metadata log).
_NEVER_TIERED_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                                  "__remote_log_metadata", "__cluster_metadata"})


def _now_ms() -> int:
    return int(time.time() * 1000)


def _resolve_config(config, overrides: dict[str, int | None]) -> TopicConfig:
    """A TopicConfig from `config` (TopicConfig, topic overrides or None) with the non-None
    `overrides` applied as topic overrides."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if config is None or isinstance(config, Mapping):
        return TopicConfig.resolve({**(config or {}), **given}, BrokerConfig({}))
    if not isinstance(config, TopicConfig):
        raise TypeError(f"config must be a TopicConfig or a mapping, got {type(config).__name__}")
    return config.with_overrides(given)


def _config_value(name: str) -> property:
    """A read-only property giving the topic config `name` of the log."""
    return property(lambda self: self.config[name])


class UnifiedLog:
    """One partition directory's local log. Use `UnifiedLog.open`."""

    def __init__(self, directory, *, config: TopicConfig, recovery_point: int,
                 clock: Callable[[], int]):
        self.dir = Path(directory)
        self.config = config
        self._clock = clock
        self._lock = threading.RLock()
        #: the segments, roll, read and flush (Kafka's LocalLog), called under `_lock`
        self._local = LocalLog(self.dir, config, max(0, int(recovery_point)), clock)
        self._log_start_offset = 0
        self._highest_offset_in_remote_storage = -1
        #: bumped by every truncation that drops offsets (see `truncation_epoch`).
        self._truncation_epoch = 0
        self._remote_log_enabled = False
        self._closed = False
        self._offline_error: Callable[[str], Exception] | None = None  # see close_offline
        self._producer_state = ProducerStateManager(self.dir)
        #: local retention, called under `_lock`
        self._retention = LogRetention(self, self._local, self._roll)
        self.leader_epoch_cache: LeaderEpochFileCache | None = None
        self.partition_metadata = PartitionMetadataFile(self.dir / PARTITION_METADATA_FILE)
        #: called with this log after `delete_records` moved the log start offset.
        self.log_start_offset_listener: Callable[[UnifiedLog], None] | None = None

    # -- configuration ---------------------------------------------------------------------

    segment_bytes = _config_value("segment.bytes")
    segment_ms = _config_value("segment.ms")
    index_interval_bytes = _config_value("index.interval.bytes")
    segment_index_bytes = _config_value("segment.index.bytes")

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

    def update_config(self, config: TopicConfig) -> None:
        """Applies a new topic config (later rolls, retention and tiering use it). Indexes
        of existing segments keep their size until the next roll; `remote_log_enabled` is
        recomputed from the topic config alone (the LogManager, which knows the broker
        config, sets it afterwards)."""
        if not isinstance(config, TopicConfig):
            raise TypeError(f"update_config needs a TopicConfig, got {type(config).__name__}")
        with self._lock:
            self.config = config
            self._local.update_config(config)
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
            self.partition_metadata.record_topic_id(topic_id)
        self.leader_epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT_FILE))
        loaded = LogLoader(self._local, self._producer_state, self.leader_epoch_cache,
                           clean_shutdown=clean_shutdown, log_start_offset=log_start_offset,
                           remote_log_enabled=self._remote_log_enabled).load()
        self._log_start_offset = loaded.log_start_offset

    # -- producer state --------------------------------------------------------------------

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

    # -- the local log (Kafka's LocalLog) -------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def log_end_offset(self) -> int:
        with self._lock:
            return self._local.log_end_offset

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._local.size_in_bytes

    @property
    def recovery_point(self) -> int:
        """The first offset not known to be flushed (Kafka's recoveryPoint)."""
        return self._local.recovery_point

    @recovery_point.setter
    def recovery_point(self, value: int) -> None:
        self._local.recovery_point = int(value)

    def _require_open(self, what: str) -> None:
        if self._closed:
            error = self._offline_error
            raise ValueError(f"{what} on closed log {self.dir}") if error is None else error(what)

    def close_offline(self, error: Callable[[str], Exception]) -> None:
        """Closes a log whose disk failed, as far as the disk allows (no flush, and without
        the lock a call stuck on that disk may hold); every later call raises
        `error(what)` (the LogManager's KafkaStorageError)."""
        self._offline_error, self._closed = error, True
        try:
            self._local.close_segments()
        except Exception as exc:  # noqa: BLE001 - the disk is failing: best effort
            log.debug("Closing offline log %s: %s", self.dir, exc)

    def roll(self) -> LogSegment:
        """Starts a new active segment at the log end offset (no-op when the active segment
        is empty). Returns the active segment."""
        with self._lock:
            self._require_open("roll")
            return self._roll(self._local.log_end_offset)

    def _roll(self, new_base: int) -> LogSegment:
        active = self._local.active_segment
        segment = self._local.roll(new_base)
        if segment is not active:
            # Kafka's roll: a producer snapshot named by the new segment's base offset, so
            # that recovery of a segment starts from the snapshot at its base (and the
            # tiering copies it with the rolled segment). Written without fsync; the next
            # flush syncs it.
            self._producer_state.map_end_offset = new_base
            self._producer_state.take_snapshot(new_base, sync=False)
        return segment

    def read(self, offset: int, max_bytes: int, min_one_message: bool = True
             ) -> tuple[memoryview, int]:
        view, next_offset, _, _ = self.read_located(offset, max_bytes, min_one_message)
        return view, next_offset

    def read_located(self, offset: int, max_bytes: int, min_one_message: bool = True
                     ) -> tuple[memoryview, int, LogSegment | None, int]:
        """Whole batches from the one holding `offset`, up to `max_bytes` (the first batch
        whole even if larger when `min_one_message`), from one segment as Kafka does.

        `read` returns (zero-copy view, next fetch offset hint): the offset after the last
        batch returned, or `offset` when nothing is (at the log end, or `max_bytes` too
        small); `read_located` adds the segment read and the view's byte position in it
        (None, 0 when nothing is read).

        Raises:
            OffsetOutOfRangeError: `offset` outside [local_log_start_offset,
                log_end_offset] (its `log_start_offset` is the local log start offset;
                offsets below it but not below `log_start_offset` are in the remote tier).
            CorruptRecordError, CorruptIndexError: damage where the offset should be
                (see engine.log.local_log).
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self._require_open("read")
            if offset < self.local_log_start_offset or offset > self._local.log_end_offset:
                raise self._out_of_local_range(offset)
            return self._local.read(offset, max_bytes, min_one_message)

    def _out_of_local_range(self, offset: int) -> OffsetOutOfRangeError:
        start, local, end = self._log_start_offset, self.local_log_start_offset, \
            self._local.log_end_offset
        tiered = (f"; offsets [{start}, {local}) are in the remote tier only"
                  if start < local else "")
        return OffsetOutOfRangeError(
            f"fetch offset {offset} of log {self.dir} is out of the local range "
            f"[{local}, {end}] (local log start offset, log end offset){tiered}",
            offset=offset, log_start_offset=local, log_end_offset=end)

    def flush(self, up_to: int | None = None) -> None:
        """fsyncs the segments holding offsets in [recovery point, up_to) (default: the log
        end) and the producer snapshots written since, and moves the recovery point to
        `up_to`."""
        with self._lock:
            self._require_open("flush")
            local = self._local
            end = local.log_end_offset
            up_to = end if up_to is None else min(int(up_to), end)
            if up_to <= local.recovery_point:
                return
            local.flush(up_to)
            self._producer_state.sync_snapshots()
            local.mark_flushed(up_to)

    def _close_segments(self) -> None:
        self._local.close_segments()

    # -- retention (engine.log.log_retention) ----------------------------------------------

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
            return self._retention.delete_old_segments()

    def delete_log_start_offset_breached_segments(self) -> int:
        """Deletes the segments whose offsets are all below the log start offset (the local
        log start offset for a tiered log with copy enabled)."""
        with self._lock:
            self._require_open("delete_log_start_offset_breached_segments")
            return self._retention.delete_log_start_offset_breached_segments()

    def delete_segments(self,
                        predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Deletes the oldest segments for which `predicate(segment, next_segment_or_None)`
        and the tiering rule (`LogRetention.may_delete_locally`) hold, stopping at the first
        for which they do not (Kafka's deletableSegments). If every segment qualifies, the
        log rolls first so that an (empty) active segment remains. The log start offset
        moves up to the first remaining segment (the local log start offset only, for a
        tiered log with copy enabled). Returns how many segments were deleted."""
        with self._lock:
            self._require_open("delete_segments")
            return self._retention.delete_segments(predicate)

    # -- properties ------------------------------------------------------------------------

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
            return max(self._log_start_offset, self._local.segments[0].base_offset)

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

    # -- appending -------------------------------------------------------------------------

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
        data, headers = validate_batches(records, self.dir)
        with self._lock:
            if self._closed:
                self._require_open("append_as_leader")
            first, last = _records.assign_offsets(headers, self._local.log_end_offset,
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
        data, headers = validate_batches(records, self.dir)
        with self._lock:
            self._require_open("append_as_follower")
            validate_follower_offsets(headers, self._local.log_end_offset, self.dir)
            self._append(data, headers)
            return int(headers["base_offset"][0]), int(headers["last_offset"][-1])

    def _append(self, data: bytes | bytearray | memoryview, headers: np.ndarray,
                leader_epoch: int | None = None) -> None:
        """Appends validated batches; `leader_epoch` is the one every batch was stamped with
        (a leader append), None when each keeps its own (a follower append)."""
        first, largest, max_ts, shallow, first_max_ts, size = _records.append_summary(headers)
        local = self._local
        segment = local.active_segment
        reason = local.should_roll(segment, size, max_ts, largest)
        if reason is not None:
            new_base = max(first, segment.next_offset())
            log.info("Rolling log %s at offset %d: %s", self.dir, new_base, reason)
            segment = self._roll(new_base)
        cache = self.leader_epoch_cache
        if leader_epoch is None:
            assign_epochs(cache, headers)
        else:  # one epoch for all the batches: the cache changes only when it rises
            latest = cache.latest_epoch
            if latest is None or leader_epoch > latest:
                cache.assign(leader_epoch, first)
        local.append(segment, largest, max_ts, shallow, data, headers, first_max_ts)
        ids = headers["producer_id"]
        # No idempotent/transactional batch: the common case, one field read per append.
        if (ids.item(0) if len(ids) == 1 else ids.max()) < 0:
            state = self._producer_state
            if state.map_end_offset <= largest:
                state.map_end_offset = largest + 1
        else:
            apply_batches(self._producer_state, data, headers, segment.txn_index.append)

    # -- closing ---------------------------------------------------------------------------

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
                self._retention.purge_deleted_files(everything=True)
                self._closed = True

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
            local = self._local
            if offset < self._log_start_offset or offset <= local.segments[0].base_offset:
                self._truncate_fully_and_start_at(offset)
                return True
            local.truncate_to(offset)
            self.leader_epoch_cache.truncate_from_end(offset)
            local.recovery_point = min(local.recovery_point, offset)
            rebuild_producer_state(local, self._producer_state, set())
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
        `leader_epochs` become the epoch cache (entries at or above `new_offset` dropped, the
        one covering the log start starting there); the producer state is reloaded from
        `producer_snapshot` (a snapshot's bytes at `new_offset`, stored as
        `<new_offset>.snapshot`). The recovery point moves to `new_offset`;
        `highest_offset_in_remote_storage` and `truncation_epoch` change as for
        `truncate_to`; then `log_start_offset_listener(self)` is called. The epoch checkpoint
        and the snapshot are written before the new segment: a crash in between leaves an
        empty log at its checkpointed start, never one at `new_offset` without its producers.

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
        local = self._local
        local.delete_segments(list(local.segments))
        self._producer_state.delete_snapshots_after(-1)
        cache = self.leader_epoch_cache
        cache.clear()
        if leader_epochs:
            cache.assign_entries(leader_epochs)
            cache.truncate_from_end(offset)
            cache.truncate_from_start(start)
        if producer_snapshot is not None:
            write_file_atomically(snapshot_file(self.dir, offset), producer_snapshot)
        local.add_segment(local.create_segment(offset))
        self._log_start_offset = start
        local.recovery_point = offset
        self._producer_state.reset(offset)
        if producer_snapshot is not None:
            rebuild_producer_state(local, self._producer_state, set())
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
            start, end = self._log_start_offset, self._local.log_end_offset
            if new_log_start_offset > end:
                raise OffsetOutOfRangeError(
                    f"delete-records offset {new_log_start_offset} of log {self.dir} is out of "
                    f"range: valid offsets are [{start}, {end}] (log start offset, log end "
                    f"offset)", offset=new_log_start_offset, log_start_offset=start,
                    log_end_offset=end)
            moved = self.maybe_increment_log_start_offset(
                new_log_start_offset, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
            start = self._log_start_offset
        listener = self.log_start_offset_listener
        if moved and listener is not None:
            # Outside the lock: the listener (the LogManager's checkpoint) reads other logs.
            listener(self)
        return start

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
            return self._local.collect_aborted_transactions(start_offset, upper_bound_offset)

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
                return self._local.max_timestamp_and_offset()
            if timestamp < 0:
                raise ValueError(f"unknown special timestamp {timestamp} for a lookup in log "
                                 f"{self.dir}")
            return self._local.find_offset_by_timestamp(timestamp, self.local_log_start_offset)

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
                f"segments={len(self._local.segments)})")
