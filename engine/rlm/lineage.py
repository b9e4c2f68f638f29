"""Leader-epoch lineage rules of the RemoteLogManager (Kafka's RemoteLogManager:
isRemoteSegmentWithinLeaderEpochs, findHighestRemoteOffset, findLogStartOffset).

Pure functions over epoch entries (`EpochEntry(epoch, start_offset)`, ascending) and remote
segment metadata, so the copier, the expiration task and ListOffsets share one definition:

- `epochs_with_offsets`: the lineage without empty epochs (an epoch starting where the next
  one starts holds no record).
- `is_remote_segment_within_leader_epochs`: Kafka's isRemoteSegmentWithinLeaderEpochs, which
  tells a segment of the current lineage from one left by a leader that lost its data (an
  unclean election) or one that overlaps a later copy.
- `find_highest_remote_offset`: the highest offset already copied, walking the lineage from
  the latest epoch back, so a new leader resumes without uploading a segment twice.
- `find_log_start_offset`: the start of the first copied segment of the earliest epoch that
  has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.log.checkpoint import EpochEntry, leader_epoch_checkpoint_text
from engine.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from engine.remote.metadata_manager import RemoteLogMetadataManager

__all__ = [
    "NO_PARTITION_LEADER_EPOCH",
    "epochs_with_offsets",
    "find_highest_remote_offset",
    "find_log_start_offset",
    "is_remote_segment_within_leader_epochs",
    "leader_epoch_checkpoint_text",
]

NO_PARTITION_LEADER_EPOCH = -1


def epochs_with_offsets(entries: Iterable[tuple[int, int]]) -> dict[int, int]:
    """epoch -> start offset, ascending, without the epochs that hold no offset (Kafka's
    buildFilteredLeaderEpochMap)."""
    pairs = sorted((int(e), int(o)) for e, o in entries)
    out: dict[int, int] = {}
    for i, (epoch, start) in enumerate(pairs):
        if i + 1 < len(pairs) and pairs[i + 1][1] == start:
            continue
        out[epoch] = start
    return out


def is_remote_segment_within_leader_epochs(metadata: RemoteLogSegmentMetadata,
                                           log_end_offset: int,
                                           lineage: dict[int, int]) -> bool:
    """Whether `metadata` belongs to the lineage `lineage` (epoch -> start offset, empty
    epochs removed, ascending) of a log ending at `log_end_offset` (Kafka's rule):
    the segment's last epoch lies within the lineage's epochs; each of its epochs from the
    first one at or above the lineage's first epoch is in the lineage, starts no earlier
    than the lineage's start of it (unless it is the lineage's first epoch), is followed by
    the same next entry as in the lineage, and the last one ends before the lineage's next
    epoch; and the segment ends below the log end offset."""
    if not lineage:
        return False
    seg = epochs_with_offsets(metadata.leader_epochs)
    if not seg:
        return False
    lineage_epochs = list(lineage)
    seg_epochs = list(seg)
    last_epoch = seg_epochs[-1]
    if last_epoch < lineage_epochs[0] or last_epoch > lineage_epochs[-1]:
        return False
    first_valid = next((e for e in seg_epochs if e >= lineage_epochs[0]), None)
    if first_valid is None:
        return False
    for i, epoch in enumerate(seg_epochs):
        if epoch < first_valid:
            continue
        if epoch not in lineage:
            return False
        j = lineage_epochs.index(epoch)
        if epoch == first_valid and j > 0 and seg[epoch] < lineage[epoch]:
            return False
        lineage_next = ((lineage_epochs[j + 1], lineage[lineage_epochs[j + 1]])
                        if j + 1 < len(lineage_epochs) else None)
        if epoch == last_epoch:
            if lineage_next is not None and metadata.end_offset > lineage_next[1] - 1:
                return False
        else:
            seg_next = (seg_epochs[i + 1], seg[seg_epochs[i + 1]])
            if lineage_next != seg_next:
                return False
    return metadata.end_offset < log_end_offset


def _end_offset_for(entries: Sequence[EpochEntry], epoch: int,
                    log_end_offset: int) -> tuple[int, int]:
    """LeaderEpochFileCache.endOffsetFor over a list of entries."""
    if not entries:
        return NO_PARTITION_LEADER_EPOCH, -1
    if epoch == entries[-1].epoch:
        return epoch, log_end_offset
    higher = next((e for e in entries if e.epoch > epoch), None)
    if higher is None:
        return NO_PARTITION_LEADER_EPOCH, -1
    floor = [e for e in entries if e.epoch <= epoch]
    return (floor[-1].epoch if floor else epoch), higher.start_offset


def find_highest_remote_offset(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition,
                               entries: Sequence[EpochEntry],
                               log_end_offset: int) -> tuple[int, int]:
    """(highest copied offset, its epoch), or (-1, -1) when nothing of the lineage is copied
    (Kafka's findHighestRemoteOffset). For the latest epoch with copied data, an epoch whose
    local end offset is at or below the remote one counts only up to that end: offsets of a
    diverged leader beyond it are not ours."""
    for entry in reversed(list(entries)):
        highest = rlmm.highest_offset_for_epoch(tip, entry.epoch)
        if highest is None:
            continue
        requested_epoch, end_offset = _end_offset_for(list(entries), entry.epoch,
                                                      log_end_offset)
        if end_offset <= highest:
            return end_offset - 1, requested_epoch
        return highest, entry.epoch
    return -1, NO_PARTITION_LEADER_EPOCH


def find_log_start_offset(rlmm: RemoteLogMetadataManager, tip: TopicIdPartition,
                          entries: Sequence[EpochEntry]) -> int | None:
    """Start offset of the first copied segment of the earliest epoch that has one (Kafka's
    findLogStartOffset), or None. Only COPY_SEGMENT_FINISHED segments count: an orphaned
    COPY_SEGMENT_STARTED entry of a crashed copy holds no readable data."""
    for entry in entries:
        for md in rlmm.list_remote_log_segments(tip, entry.epoch):
            if md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                return md.start_offset
    return None
