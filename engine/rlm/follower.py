"""A follower's partition built from the remote tier (Kafka's TierStateMachine,
ReplicaFetcherTierStateMachine.buildRemoteLogAuxState; KIP-405), and the follower task
(Kafka's RLMFollowerTask: `RLMFollowerTask` keeps the highest offset in remote storage
current). The RemoteLogManager builds one `TierStateMachine` and one `RLMFollowerTask`, each
with the collaborators it names.

A follower whose fetch offset is below the leader's local log start offset cannot fetch
those offsets from the leader (Kafka's OFFSET_MOVED_TO_TIERED_STORAGE): only the tier holds
them. It starts its log past them instead, with the state they would have built:

1. The segment holding `prev` = leader's local log start offset - 1, looked up in the RLMM
   by the leader's epoch of `prev` (the caller asks the leader for it, as Kafka's fetcher
   does with OffsetsForLeaderEpoch). The follower goes on from `next` = that segment's end
   offset + 1: the leader's local log start offset when its tiered segments end where its
   local ones begin, as they do when it tiered them itself.
2. That segment's leader-epoch checkpoint and producer snapshot, through the RSM's
   `fetch_index` (LEADER_EPOCH, PRODUCER_SNAPSHOT; the filesystem tier checks each file's
   size and CRC-32C against the segment's custom metadata), and checked here before use:
   the checkpoint parses as a version-0 `leader-epoch-checkpoint` with increasing epochs and
   offsets, and gives each epoch the segment's metadata records the start the metadata
   gives it; the snapshot decodes (version, length, CRC) and records no offset at or past
   `next`. An empty stored snapshot (the leader's log kept none, see LogSegmentData) gives
   an empty producer state, with a warning. Nothing of the follower changes before both
   are fetched and checked, so a failure leaves its log as it was.
3. `UnifiedLog.truncate_fully_and_start_at(next, ...)` under the log's lock: the log start
   offset is the leader's, raised to the first copied segment of the lineage when the tier
   begins later (Kafka's findLogStartOffset, as a leader's first copy run does: no offset
   is offered that no tier holds); the local log start offset is `next`; the epoch cache
   is the checkpoint's entries below `next`; `<next>.snapshot` holds the fetched bytes and
   the producer state is loaded from it, so transactions open at `next` stay open and the
   last stable offset stays below them until their markers are fetched.
4. The highest offset in remote storage is the segment's end offset, so the follower's
   local retention deletes nothing that is not tiered.

The follower then fetches from the leader at `next` (`UnifiedLog.append_as_follower`), and
its RemoteLogManager serves offsets below `next` from the tier.

A follower whose log end offset is already at or past the leader's local log start offset
fetches from the leader: the call changes nothing and returns its log end offset. So a
second call is a no-op, whether the follower has fetched more since or not; once the
leader's local log start moves past the follower's log end (more was tiered and deleted
locally), a call builds the follower again at the new start.

Errors name the partition and the offsets: RemoteLogAuxStateError (a RemoteStorageError,
retriable) when the partition's remote log metadata is not ready (KAFKA-19523), no copied
segment holds `prev` in that epoch, the RSM fails or the log is not tiered; CorruptCheckpointError /
CorruptSnapshotError when a fetched file does not verify;
ValueError for arguments that contradict each other or a partition that is not a follower
here. Kafka's fetcher retries on its next round; here the caller retries (the log is
untouched, and BuildRemoteLogAuxStateErrorsPerSec counts the failure).
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING

from engine.errors import (
    CorruptCheckpointError,
    CorruptSnapshotError,
    RemoteLogAuxStateError,
    RemoteStorageError,
    UnknownTopicOrPartitionError,
)
from engine.log.checkpoint import EpochEntry, LeaderEpochCheckpointFile, epoch_for_offset
from engine.log.producer_state import decode_snapshot
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.storage import IndexType
from engine.rlm.lineage import find_highest_remote_offset, find_log_start_offset
from engine.rlm.state import PartitionState

if TYPE_CHECKING:
    from engine.log.log_manager import LogManager
    from engine.remote.metadata_manager import RemoteLogMetadataManager
    from engine.remote.storage import RemoteStorageManager
    from engine.rlm.metrics import RLMMetrics

__all__ = ["RLMFollowerTask", "TierStateMachine"]

log = logging.getLogger(__name__)


class TierStateMachine:
    """Builds a follower's partition from the tier (see the module notes).

    Args:
        log_manager: the local logs (the follower's log is looked up there).
        rlmm, rsm: the plugins.
        metrics: the RemoteLogManager's metrics (BuildRemoteLogAuxState*PerSec).
    """

    def __init__(self, *, log_manager: LogManager, rlmm: RemoteLogMetadataManager,
                 rsm: RemoteStorageManager, metrics: RLMMetrics):
        self.log_manager, self.rlmm, self.rsm, self.metrics = log_manager, rlmm, rsm, metrics

    def build_remote_log_aux_state(self, st: PartitionState | None, topic: str,
                                   partition: int, *, leader_log_start_offset: int,
                                   leader_local_log_start_offset: int,
                                   target_epoch: int) -> int:
        """Builds this follower's partition from the remote tier at the leader's local log
        start offset (Kafka's buildRemoteLogAuxState; see the module docstring): the epoch
        cache and producer state of the remote segment holding
        `leader_local_log_start_offset - 1`, found by `target_epoch` (the leader's epoch of
        that offset), then the log truncated fully and started past that segment. Returns
        the offset to fetch from the leader next; a no-op returning the log end offset when
        it is already at or past the leader's local log start. `st` is the RLM's state of
        the partition (None when it serves none).

        Raises:
            RemoteLogAuxStateError: the remote log metadata is not ready, no copied segment
                holds the offset in that epoch, the RSM failed, or the log is not tiered
                (retriable; the log is unchanged).
            CorruptCheckpointError, CorruptSnapshotError: a fetched file does not verify.
            ValueError: contradicting offsets, or the partition is not a follower here.
            UnknownTopicOrPartitionError: no such partition.
        """
        name = f"{topic}-{partition}"
        leader_log_start_offset = int(leader_log_start_offset)
        local_start = int(leader_local_log_start_offset)
        target_epoch = int(target_epoch)
        if not 0 <= leader_log_start_offset <= local_start:
            raise ValueError(f"cannot build partition {name} from the remote tier: the "
                             f"leader's log start offset {leader_log_start_offset} and local "
                             f"log start offset {local_start} need 0 <= log start <= local "
                             f"log start")
        if target_epoch < 0:
            raise ValueError(f"cannot build partition {name} from the remote tier: leader "
                             f"epoch {target_epoch} of offset {local_start - 1} is negative")
        unified = self.log_manager.get_log(topic, partition)
        if unified is None:
            raise UnknownTopicOrPartitionError.no_log(topic, partition)
        end = unified.log_end_offset
        if end >= local_start:
            log.debug("%s: log end offset %d is at or past the leader's local log start "
                      "offset %d: it fetches from the leader, nothing to build", name, end,
                      local_start)
            return end
        if local_start == leader_log_start_offset:
            raise ValueError(f"cannot build partition {name} from the remote tier: the "
                             f"leader's local log start offset {local_start} is its log start "
                             f"offset, so no offset below it is tiered; a follower at {end} "
                             f"starts over with truncate_fully_and_start_at({local_start}) "
                             f"and fetches from there")
        self.metrics.mark("BuildRemoteLogAuxStateRequestsPerSec", topic)
        try:
            return self._build(st, unified, (topic, int(partition)), leader_log_start_offset,
                               local_start, target_epoch)
        except Exception:
            self.metrics.mark("BuildRemoteLogAuxStateErrorsPerSec", topic)
            raise

    def _build(self, st, unified, tp: tuple[str, int], leader_log_start_offset: int,
               local_start: int, target_epoch: int) -> int:
        name = f"{tp[0]}-{tp[1]}"
        offsets = (f"leader log start offset {leader_log_start_offset}, local log start "
                   f"offset {local_start}, epoch {target_epoch} of offset {local_start - 1}")
        if not unified.remote_log_enabled:
            raise RemoteLogAuxStateError(
                f"cannot build partition {name} from the remote tier ({offsets}): remote "
                f"storage is not enabled for it (remote.log.storage.system.enable and the "
                f"topic's remote.storage.enable)", partition=tp, offset=local_start - 1)
        if st is None or st.is_leader:
            raise ValueError(f"cannot build partition {name} from the remote tier: it is "
                             f"{'a leader' if st is not None else 'not served'} on this "
                             f"engine; on_leadership_change(followers=...) makes it a "
                             f"follower first")
        prev = local_start - 1
        if not self.rlmm.is_ready(st.tip):  # KAFKA-19523: retriable, not a failure of the log
            raise RemoteLogAuxStateError(
                f"cannot build partition {name} from the remote tier ({offsets}): its remote "
                f"log metadata is not ready (not loaded, or damaged: see the RLMM's log); the "
                f"follower's log is unchanged, build again later", partition=tp, offset=prev)
        md = self.rlmm.remote_log_segment_metadata(st.tip, target_epoch, prev)
        if md is None:
            raise RemoteLogAuxStateError(
                f"cannot build partition {name} from the remote tier ({offsets}): no copied "
                f"remote segment of topic id {st.tip.topic_id} holds offset {prev} in epoch "
                f"{target_epoch} (its metadata has not reached this engine, or the leader's "
                f"tier moved on); the follower's log is unchanged, build again later",
                partition=tp, offset=prev)
        next_offset = md.end_offset + 1
        epochs = _leader_epochs(self.rsm, md, tp, next_offset)
        snapshot = _producer_snapshot(self.rsm, md, tp, next_offset)
        start = leader_log_start_offset
        tier_start = find_log_start_offset(self.rlmm, st.tip, epochs)
        if tier_start is not None and tier_start > start:
            log.info("%s: the tier begins at %d, above the leader's log start offset %d: "
                     "the follower's log starts there", name, tier_start, start)
            start = min(tier_start, next_offset)
        unified.truncate_fully_and_start_at(next_offset, start, leader_epochs=epochs,
                                            producer_snapshot=snapshot)
        unified.update_highest_offset_in_remote_storage(md.end_offset)
        log.info("%s: built from remote segment %s (offsets [%d, %d]): log start offset %d, "
                 "local log start offset %d, %d epoch entries, %d producers; fetching from "
                 "the leader at %d", name, md.remote_log_segment_id.id, md.start_offset,
                 md.end_offset, start, next_offset, len(unified.leader_epoch_cache.entries),
                 len(unified.producer_state.producers), next_offset)
        return next_offset


class RLMFollowerTask:
    """Kafka's RLMFollowerTask: keeps a follower's highest offset in remote storage current,
    so that local retention, which a follower applies as a leader does (local.retention.*,
    tiered segments only), never deletes what is not tiered.

    Args:
        rlmm: the RLMM (the highest copied offset of the follower's lineage).
    """

    def __init__(self, *, rlmm: RemoteLogMetadataManager):
        self.rlmm = rlmm

    def run(self, st: PartitionState) -> None:
        offset, _ = find_highest_remote_offset(self.rlmm, st.tip,
                                               st.log.leader_epoch_cache.entries,
                                               st.log.log_end_offset)
        st.log.update_highest_offset_in_remote_storage(offset)


def _describe(md: RemoteLogSegmentMetadata, tp: tuple[str, int], what: str) -> str:
    return (f"{what} of remote segment {md.remote_log_segment_id.id} (offsets "
            f"[{md.start_offset}, {md.end_offset}]) of partition {tp[0]}-{tp[1]}")


def _fetch(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, index_type: IndexType,
           tp: tuple[str, int], what: str) -> bytes:
    try:
        with rsm.fetch_index(md, index_type) as stream:
            return stream.read()
    except RemoteStorageError as exc:
        raise RemoteLogAuxStateError(
            f"cannot build partition {tp[0]}-{tp[1]} from the remote tier: fetching the "
            f"{_describe(md, tp, what)} failed: {exc}", partition=tp, offset=md.end_offset,
            file=exc.file) from exc


def _leader_epochs(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, tp: tuple[str, int],
                   next_offset: int) -> list[EpochEntry]:
    """The segment's leader-epoch checkpoint, checked, without entries at or past
    `next_offset`."""
    what = "leader-epoch checkpoint"
    source = _describe(md, tp, what)
    entries = LeaderEpochCheckpointFile.decode_entries(
        _fetch(rsm, md, IndexType.LEADER_EPOCH, tp, what), source)
    for before, after in itertools.pairwise(entries):
        if not (before.epoch < after.epoch and before.start_offset < after.start_offset):
            raise CorruptCheckpointError(
                f"entry {after.epoch} {after.start_offset} does not follow "
                f"{before.epoch} {before.start_offset}: epochs and offsets must increase",
                file=source)
    entries = [e for e in entries if e.start_offset < next_offset]
    for epoch, start in md.leader_epochs:
        found = epoch_for_offset(entries, start)
        if found != epoch:
            raise CorruptCheckpointError(
                f"gives offset {start} epoch {found}, but the segment's metadata says epoch "
                f"{epoch} starts there", file=source, offset=start)
    return entries


def _producer_snapshot(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, tp: tuple[str, int],
                       next_offset: int) -> bytes | None:
    """The segment's producer snapshot (taken at `next_offset`), checked; None when the
    tier stored an empty one."""
    what = "producer snapshot"
    source = _describe(md, tp, what)
    data = _fetch(rsm, md, IndexType.PRODUCER_SNAPSHOT, tp, what)
    if not data:
        log.warning("%s is empty (the leader's log kept none): the follower starts with no "
                    "producer state at %d", source, next_offset)
        return None
    for entry in decode_snapshot(data, file=source):
        late = max(entry.last_offset, entry.current_txn_first_offset)
        if late >= next_offset:
            raise CorruptSnapshotError(
                f"producer {entry.producer_id} has offset {late}, not below {next_offset} "
                f"where the snapshot was taken", file=source, offset=late)
    return data
