"""The leader-epoch cache of one partition (Kafka's `LeaderEpochFileCache`).

Entries (epoch, start offset) are kept ordered by epoch with strictly increasing epochs and
start offsets, and written to `leader-epoch-checkpoint` after every change. Thread-safe.
"""

from __future__ import annotations

import logging
import threading

from engine.log.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    epoch_entries_in_range,
    epoch_for_offset,
    leader_epoch_checkpoint_text,
)

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochFileCache"]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Leader epochs and the first offset of each, checkpointed to `checkpoint` (a
    LeaderEpochCheckpointFile, or None to keep the cache in memory only)."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None):
        self._checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        if checkpoint is not None:
            for entry in checkpoint.read():
                self._assign_unflushed(EpochEntry(int(entry[0]), int(entry[1])))

    @property
    def entries(self) -> list[EpochEntry]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        # Read on every leader append: no lock, one atomic slice of the entry list.
        last = self._entries[-1:]
        return last[0].epoch if last else None

    def _assign_unflushed(self, entry: EpochEntry) -> bool:
        latest = self._entries[-1] if self._entries else None
        if latest is not None and entry.epoch == latest.epoch \
                and entry.start_offset >= latest.start_offset:
            return False  # Kafka's isUpdateNeeded: same epoch, not earlier
        # Kafka's maybeTruncateNonMonotonicEntries: drop entries that would break the order.
        removed = [e for e in self._entries
                   if e.epoch >= entry.epoch or e.start_offset >= entry.start_offset]
        if removed:
            log.info("Removing leader epoch entries %s before assigning %s", removed, entry)
        self._entries = [e for e in self._entries
                         if e.epoch < entry.epoch and e.start_offset < entry.start_offset]
        self._entries.append(entry)
        return True

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that `epoch` starts at `start_offset` (Kafka's rules: nothing changes when
        the epoch is the latest one and the offset is not earlier; entries with an epoch >=
        `epoch` or a start offset >= `start_offset` are removed). Returns whether it changed
        (and was checkpointed)."""
        if epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {epoch}")
        if start_offset < 0:
            raise ValueError(f"start offset must be >= 0, got {start_offset}")
        with self._lock:
            changed = self._assign_unflushed(EpochEntry(int(epoch), int(start_offset)))
            if changed:
                self._flush()
            return changed

    def assign_entries(self, entries) -> None:
        """Assigns each (epoch, start offset) in order with `assign`'s rules and writes the
        checkpoint once (Kafka's assign of a list, as a follower restores a fetched cache).

        Raises:
            ValueError: a negative epoch or start offset (nothing is assigned then).
        """
        entries = [EpochEntry(int(e), int(o)) for e, o in entries]
        bad = next((e for e in entries if e.epoch < 0 or e.start_offset < 0), None)
        if bad is not None:
            raise ValueError(f"leader epoch entries must not be negative, got {bad}")
        with self._lock:
            for entry in entries:
                self._assign_unflushed(entry)
            self._flush()

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset`, None if it is before the first entry."""
        with self._lock:
            return epoch_for_offset(self._entries, offset)

    def epoch_entries_in_range(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries covering [start_offset, end_offset) (Kafka's epochEntriesInRange:
        the entry covering `start_offset` comes back starting there; -1 leaves a side
        open)."""
        with self._lock:
            return epoch_entries_in_range(self._entries, start_offset, end_offset)

    def checkpoint_text(self, up_to_offset: int) -> bytes:
        """`leader-epoch-checkpoint` bytes of the entries starting below `up_to_offset`
        (Kafka's copy of the cache truncated from the end, as tiered with a segment)."""
        with self._lock:
            entries = list(self._entries)
        return leader_epoch_checkpoint_text(entries, up_to_offset)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's endOffsetFor answers an OffsetsForLeaderEpoch
        request: the latest epoch ends at the log end; an older one at the start of the next
        higher epoch, reported with the largest known epoch <= the requested one; an unknown
        higher epoch (or -1) gives (-1, -1)."""
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._entries[-1].epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = [e for e in self._entries if e.epoch <= requested_epoch]
            return (floor[-1].epoch if floor else requested_epoch), higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Removes the entries starting at or after `end_offset` (log truncated to it)."""
        with self._lock:
            if end_offset >= 0 and self._entries and \
                    self._entries[-1].start_offset >= end_offset:
                self._entries = [e for e in self._entries if e.start_offset < end_offset]
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drops the entries wholly before `start_offset` (log start moved); the entry
        covering it has its start raised to `start_offset`."""
        with self._lock:
            before = [e for e in self._entries if e.start_offset <= start_offset]
            if not before:
                return
            keep = before[-1]
            rest = [e for e in self._entries if e.start_offset > start_offset]
            entries = [EpochEntry(keep.epoch, start_offset), *rest]
            if entries != self._entries:
                self._entries = entries
                self._flush()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def flush(self) -> None:
        """Writes the checkpoint (an empty cache writes a checkpoint with no entries)."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._entries)

    def __repr__(self):
        return f"LeaderEpochFileCache({self._entries})"
