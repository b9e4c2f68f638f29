"""Loading a partition directory (Kafka's `LogLoader`): leftovers, swaps, recovery and the
producer state rebuilt from snapshots. `UnifiedLog.open` runs one over its `LocalLog`.

Kafka's rules kept here:

- Loading: `.deleted`, `.cleaned` and temporary checkpoint files are removed; a `.log.swap`
  replaces the segments its offsets cover and its indexes are rebuilt; index files without a
  `.log` are removed.
- Recovery: every segment from the one holding the recovery point on is scanned with CRCs
  (`LogSegment.recover`) unless the shutdown was clean; segments whose indexes are missing or
  fail their sanity check are recovered in any case. The first segment truncated by its
  recovery ends the log: the later segments are deleted, and what was dropped is logged at
  WARNING. Nothing before the first invalid batch is dropped.
- Producer state: loading and truncation rebuild it from the latest snapshot at or below
  the first segment recovered (or the truncation point) and replay the batches after it,
  rewriting the recovered segments' `.txnindex`; snapshots above the log end and stray
  ones are deleted, a damaged one is deleted with a warning and an older one tried.

`LogLoader.load` fills the `LocalLog` it is given and the producer state and epoch cache it
is given, before the log is shared, and returns the log start offset and recovery point it
settled on (Kafka's LoadedLogOffsets); truncation reuses `rebuild_producer_state`.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.errors import CorruptIndexError, CorruptSnapshotError
from engine.log.leader_epoch import LeaderEpochFileCache
from engine.log.local_log import _INDEX_SUFFIXES, DELETED_SUFFIX, LocalLog
from engine.log.producer_state import ProducerStateManager, apply_batches
from engine.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)

__all__ = ["LEADER_EPOCH_CHECKPOINT_FILE", "LoadedLogOffsets", "LogLoader", "assign_epochs",
           "rebuild_producer_state"]

# the log records of every part of UnifiedLog keep its logger name
log = logging.getLogger("engine.log.unified_log")

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")


@dataclass(frozen=True)
class LoadedLogOffsets:
    """What `LogLoader.load` settled on (Kafka's LoadedLogOffsets)."""

    log_start_offset: int
    recovery_point: int


class _EpochAssigner:
    """Feeds recovered batch headers to the epoch cache (Kafka's recovery rule)."""

    def __init__(self, cache: LeaderEpochFileCache):
        self.cache = cache

    def update(self, headers: np.ndarray) -> None:
        assign_epochs(self.cache, headers)


def assign_epochs(cache: LeaderEpochFileCache, headers: np.ndarray) -> None:
    """Assigns (epoch, first offset) for each batch whose partition leader epoch is above
    the cache's latest one (Kafka's rule for appends and recovery)."""
    # Only the rows where the epoch rises change the cache; they are found in native code.
    latest = cache.latest_epoch
    for epoch, start_offset in _records.epoch_rises(headers, -1 if latest is None else latest):
        cache.assign(epoch, start_offset)


class LogLoader:
    """Loads one partition directory into `local` (see the module notes).

    Args:
        local: the (empty) local log of the directory.
        producer_state, leader_epoch_cache: the log's, rebuilt and trimmed by the load.
        clean_shutdown: skip the recovery scan where every index passes its sanity check.
        log_start_offset: the checkpointed log start offset, or None.
        remote_log_enabled: whether the log is tiered (its start may lie below the local
            segments).
    """

    def __init__(self, local: LocalLog, producer_state: ProducerStateManager,
                 leader_epoch_cache: LeaderEpochFileCache, *, clean_shutdown: bool,
                 log_start_offset: int | None, remote_log_enabled: bool):
        self.local = local
        self.dir = local.dir
        self.producer_state = producer_state
        self.leader_epoch_cache = leader_epoch_cache
        self.clean_shutdown = clean_shutdown
        self.log_start_offset = log_start_offset
        self.remote_log_enabled = remote_log_enabled

    def load(self) -> LoadedLogOffsets:
        local = self.local
        self._remove_temporary_files()
        self._complete_swaps()
        bases = self._segment_bases()
        missing_index = {b for b in bases
                         if not all((self.dir / segment_file_name(b, s)).exists()
                                    for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX))}
        for base in bases:
            local.add_segment(local.open_segment(base))
        checkpointed = self.log_start_offset
        if not local.segments:
            local.add_segment(local.create_segment(0 if checkpointed is None
                                                   else int(checkpointed)))
        recovered = self._recover(missing_index)
        local.active_segment.resize_indexes()
        end = local.log_end_offset
        if checkpointed is not None:
            # A checkpointed start is kept even below the first local segment, whatever
            # `remote_log_enabled` is now (Kafka's LogLoader raises it for an untiered log):
            # a tiered log opened with tiering off must not forget the remote offsets it
            # still holds, or they would be deleted as a log start breach once tiering is
            # back. An untiered log reads from its local start in any case.
            start = int(checkpointed)
        else:
            # A tiered log without a checkpoint begins at 0 (its start may lie in the
            # remote tier) until the RemoteLogManager raises it, as Kafka's.
            start = 0 if self.remote_log_enabled else local.segments[0].base_offset
        start = min(start, end)
        # Kafka's LogLoader: after a clean shutdown with nothing recovered, everything up to
        # the log end is known to be flushed.
        if self.clean_shutdown and not recovered:
            local.recovery_point = end
        local.recovery_point = min(local.recovery_point, end)
        self.leader_epoch_cache.truncate_from_end(end)
        self.leader_epoch_cache.truncate_from_start(start)
        self.leader_epoch_cache.flush()  # an empty cache still gets "0\n0\n", as Kafka's
        self._remove_stray_snapshots()
        rebuild_producer_state(local, self.producer_state, recovered)
        return LoadedLogOffsets(start, local.recovery_point)

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

    def _recover(self, missing_index: set[int]) -> set[int]:
        """Recovers what needs it; returns the base offsets of the segments recovered (their
        transaction indexes were reset and are rebuilt with the producer state)."""
        local = self.local
        # The segment holding the recovery point and every later one, unless clean.
        holder = local.segment_index_at(local.recovery_point)
        assigner = _EpochAssigner(self.leader_epoch_cache)
        recovered: set[int] = set()
        for i, segment in enumerate(list(local.segments)):
            needs = segment.base_offset in missing_index or not self._indexes_sane(segment)
            if not self.clean_shutdown and i >= holder:
                needs = True
            if not needs:
                continue
            truncated = segment.recover(assigner)
            recovered.add(segment.base_offset)
            if truncated:
                self._drop_after(segment, truncated)
                break
        return recovered

    def _drop_after(self, segment: LogSegment, truncated: int) -> None:
        """Deletes every segment after `segment` (recovery truncated it), logging what."""
        segments = self.local.segments
        later = segments[segments.index(segment) + 1:]
        dropped = [f"{s.log_file.name} (offsets [{s.base_offset}, {s.next_offset() - 1}], "
                   f"{s.size_in_bytes} bytes)" for s in later]
        log.warning("Recovery of %s truncated %d bytes at offset %d; deleting %d later "
                    "segment(s) after the corruption point: %s", segment.log_file, truncated,
                    segment.next_offset(), len(later), ", ".join(dropped) or "none")
        self.local.delete_segments(later)

    def _remove_stray_snapshots(self) -> None:
        """Kafka's removeStraySnapshots: a snapshot not named by a segment's base offset is
        kept only if it is the latest such one and above every base offset (the snapshot
        a clean shutdown wrote at the log end)."""
        bases = set(self.local.bases)
        strays = [(offset, path) for offset, path in self.producer_state.snapshot_files()
                  if offset not in bases]
        keep = strays[-1][0] if strays and strays[-1][0] > self.local.bases[-1] else None
        for offset, path in strays:
            if offset != keep:
                log.info("Deleting stray producer snapshot %s of log %s", path.name, self.dir)
                path.unlink(missing_ok=True)


def rebuild_producer_state(local: LocalLog, state: ProducerStateManager,
                           rewrite_txn_index: set[int]) -> None:
    """Kafka's rebuildProducerState: snapshots above the log end are deleted; the state is
    loaded from the latest readable snapshot at or below the first segment in
    `rewrite_txn_index` (else below the log end) and the batches after it are replayed.
    The segments in `rewrite_txn_index` get their aborted transactions re-appended to their
    (reset) transaction indexes. A damaged snapshot is deleted with a warning and an older
    one is tried; with none, the replay starts at the first segment."""
    end = local.log_end_offset
    state.delete_snapshots_after(end)
    limit = min(rewrite_txn_index) if rewrite_txn_index else end
    first = local.segments[0].base_offset
    state.reset(first)
    for offset, path in reversed(state.snapshot_files()):
        if offset > limit or offset < first:
            continue
        try:
            state.load_snapshot(path)
            break
        except CorruptSnapshotError as exc:
            log.warning("Deleting unreadable producer snapshot %s of log %s: %s", path,
                        local.dir, exc)
            path.unlink(missing_ok=True)
    start = state.map_end_offset
    if start >= end:
        return
    for segment in local.segments[local.segment_index_at(start):]:
        if segment.size_in_bytes == 0:
            continue
        info = segment.read(max(start, segment.base_offset), segment.size_in_bytes)
        if info is None or not info.records.nbytes:
            continue
        headers, _ = _records.scan(info.records, False)
        headers = headers[headers["base_offset"] >= start]
        target = segment if segment.base_offset in rewrite_txn_index else None
        _apply_producer_batches(state, info.records, headers, target)


def _apply_producer_batches(state: ProducerStateManager, data, headers: np.ndarray,
                            segment: LogSegment | None) -> None:
    """Updates the producer state with replayed batches; aborted transactions go to
    `segment`'s transaction index when a segment is given."""
    if not len(headers):
        return
    ids = headers["producer_id"]
    # No idempotent/transactional batch: the common case.
    if (ids.item(0) if len(ids) == 1 else ids.max()) < 0:
        state.map_end_offset = max(state.map_end_offset, int(headers["last_offset"][-1]) + 1)
        return
    apply_batches(state, data, headers, None if segment is None else segment.txn_index.append)
