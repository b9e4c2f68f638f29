"""The in-memory remote-log metadata of one partition (Kafka's RemoteLogMetadataCache with
its per-epoch RemoteLogLeaderEpochState).

The cache knows nothing about storage: a backend (the embedded metadata log, or any other
source of events) feeds it the three KIP-405 events and asks it questions. Backends that
must persist an event before applying it call the `check_*` method first (raises, changes
nothing), persist, then apply.

What each query sees, by segment state:

| query                                  | STARTED | FINISHED | DELETE_STARTED | DELETE_FINISHED |
|----------------------------------------|---------|----------|----------------|-----------------|
| remote_log_segment_metadata(ep, off)   | no      | yes      | no             | no (purged)     |
| highest_offset_for_epoch(ep)           | no      | yes (*)  | yes (*)        | yes (*)         |
| list_remote_log_segments(ep) / all     | yes     | yes      | yes            | no (purged)     |

(*) an epoch's highest offset only ever grows: it counts every segment that reached
COPY_SEGMENT_FINISHED, including ones deleted since (Kafka keeps it the same way).

Per leader epoch the cache keeps (as Kafka does) a map "start offset of this epoch within a
segment -> segment id" over the FINISHED segments and a set of "unreferenced" ids: segments
still being copied, being deleted, or displaced by a later FINISHED segment of another
leader that covers the same offsets of the epoch (overlapping or duplicate uploads after a
leader change). A displaced segment stays listed so the expiration task can delete it, but
lookups no longer return it.

Partition deletion (DELETE_PARTITION_MARKED -> STARTED -> FINISHED) is recorded here too;
at FINISHED the partition's segments are purged and no segment may be added any more.

Thread-safety: none; the owner serializes access (EmbeddedRemoteLogMetadataManager holds one
lock per partition).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.common import Uuid
from engine.errors import RemoteResourceNotFoundError
from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    check_partition_delete_transition,
    check_segment_transition,
)

__all__ = ["EpochStateSnapshot", "RemoteLogLeaderEpochState", "RemoteLogMetadataCache"]

_S = RemoteLogSegmentState
#: how an epoch state names segments (the cache: the segment id's Uuid; a snapshot: the id)
_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class EpochStateSnapshot(Generic[_K]):
    """One epoch's state, as exported for a snapshot: `referenced` is (epoch start offset
    within the segment, segment) ascending; `unreferenced` keeps insertion order. Segments
    are RemoteLogSegmentIds from RemoteLogMetadataCache.epoch_states(), the epoch state's own
    keys from RemoteLogLeaderEpochState.export()."""

    epoch: int
    highest_offset: int | None
    referenced: tuple[tuple[int, _K], ...]
    unreferenced: tuple[_K, ...]


class RemoteLogLeaderEpochState(Generic[_K]):
    """The segments holding offsets of one leader epoch. Segments are named by any hashable
    key (the cache uses the segment id's Uuid: one partition per cache, and a Uuid hashes
    far faster than the whole RemoteLogSegmentId)."""

    __slots__ = ("_offset_to_id", "_starts", "_unreferenced", "highest_offset")

    def __init__(self):
        self._starts: list[int] = []                      # sorted keys of _offset_to_id
        self._offset_to_id: dict[int, _K] = {}
        self._unreferenced: dict[_K, None] = {}   # an ordered set
        self.highest_offset: int | None = None

    def segment_ids(self) -> list[_K]:
        """Referenced ids in start-offset order, then unreferenced ones."""
        ids = [self._offset_to_id[start] for start in self._starts]
        ids.extend(self._unreferenced)
        return ids

    def floor_segment_id(self, offset: int) -> _K | None:
        """The FINISHED segment whose epoch start is the greatest one <= offset."""
        i = bisect.bisect_right(self._starts, offset)
        return self._offset_to_id[self._starts[i - 1]] if i else None

    def on_copy_started(self, segment_id: _K) -> None:
        self._unreferenced[segment_id] = None

    def on_copy_finished(self, start: int, segment_id: _K, epoch_end: int):
        # A later leader may upload a segment covering offsets of this epoch that an earlier
        # upload already covers (a duplicate, or an overlapping one starting lower): the
        # entries starting at or after this segment's epoch start are displaced, as long as
        # this segment reaches at least as far as the epoch's highest offset.
        while (self._starts and self._starts[-1] >= start
               and self.highest_offset is not None and self.highest_offset <= epoch_end):
            displaced = self._offset_to_id.pop(self._starts.pop())
            self._unreferenced[displaced] = None
        replaced = self._offset_to_id.get(start)
        if replaced is None:
            bisect.insort(self._starts, start)
        elif replaced != segment_id:   # same epoch start, shorter: still listed for deletion
            self._unreferenced[replaced] = None
        self._offset_to_id[start] = segment_id
        self._unreferenced.pop(segment_id, None)
        if self.highest_offset is None or epoch_end > self.highest_offset:
            self.highest_offset = epoch_end

    def on_delete_started(self, start: int, segment_id: _K) -> None:
        if self._offset_to_id.get(start) == segment_id:
            del self._offset_to_id[start]
            self._starts.remove(start)
        # still listed, so a failed delete is retried by the next expiration run
        self._unreferenced[segment_id] = None

    def on_delete_finished(self, segment_id: _K) -> None:
        self._unreferenced.pop(segment_id, None)

    def export(self, epoch: int) -> EpochStateSnapshot[_K]:
        return EpochStateSnapshot(
            epoch, self.highest_offset,
            tuple((start, self._offset_to_id[start]) for start in self._starts),
            tuple(self._unreferenced))

    @classmethod
    def restore(cls, snapshot: EpochStateSnapshot[_K]) -> RemoteLogLeaderEpochState[_K]:
        state: RemoteLogLeaderEpochState[_K] = cls()
        state.highest_offset = snapshot.highest_offset
        for start, segment_id in snapshot.referenced:
            state._offset_to_id[start] = segment_id
        state._starts = sorted(state._offset_to_id)
        state._unreferenced = dict.fromkeys(snapshot.unreferenced)
        return state


def _epoch_end(metadata: RemoteLogSegmentMetadata, epoch: int) -> int:
    """The last offset of `epoch` inside the segment: the next epoch's start - 1, or the
    segment's end offset when `epoch` is its last one."""
    epochs = metadata.leader_epochs
    i = bisect.bisect_right(epochs, (epoch, float("inf")))
    return epochs[i][1] - 1 if i < len(epochs) else metadata.end_offset


class RemoteLogMetadataCache:
    """The remote segments of one partition and the partition's deletion state.

    Mutators raise IllegalStateTransitionError for a transition Kafka refuses (and change
    nothing), RemoteResourceNotFoundError for an update of an unknown segment, and
    ValueError for an event of another partition.
    """

    def __init__(self, topic_id_partition: TopicIdPartition):
        self.topic_id_partition = topic_id_partition
        self._segments: dict[Uuid, RemoteLogSegmentMetadata] = {}   # by segment id's Uuid
        self._epochs: dict[int, RemoteLogLeaderEpochState[Uuid]] = {}
        self._delete_metadata: RemotePartitionDeleteMetadata | None = None

    # ---- events --------------------------------------------------------------------------

    def check_add(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Raises what add_copy_in_progress_segment would raise; changes nothing."""
        self._check_partition(metadata.topic_id_partition)
        if metadata.state != _S.COPY_SEGMENT_STARTED:
            raise IllegalStateTransitionError(
                f"a segment is added in state COPY_SEGMENT_STARTED, got {metadata.state.name} "
                f"for {metadata.remote_log_segment_id}")
        if self.partition_delete_state is not None:  # MARKED, STARTED or FINISHED
            raise IllegalStateTransitionError(
                f"partition {self.topic_id_partition} is being deleted or deleted "
                f"({self.partition_delete_state.name}): cannot add "
                f"{metadata.remote_log_segment_id}")
        existing = self._segments.get(metadata.remote_log_segment_id.id)
        source = None if existing is None else existing.state
        if not _S.is_valid_transition(source, metadata.state):  # message built only if needed
            check_segment_transition(source, metadata.state, str(metadata.remote_log_segment_id))

    def add_copy_in_progress_segment(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Adds a segment whose copy starts (state COPY_SEGMENT_STARTED); adding the same
        segment again while it is still STARTED replaces its metadata."""
        self.check_add(metadata)
        segment_id = metadata.remote_log_segment_id.id
        previous = self._segments.get(segment_id)
        if previous is not None:  # a retried add may carry other epochs: forget the old ones
            for epoch, _ in previous.leader_epochs:
                self._epoch_state(epoch).on_delete_finished(segment_id)
        for epoch, _ in metadata.leader_epochs:
            self._epoch_state(epoch).on_copy_started(segment_id)
        self._segments[segment_id] = metadata

    def check_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """The segment's metadata after `update`; raises what
        update_remote_log_segment_metadata would raise and changes nothing."""
        self._check_partition(update.topic_id_partition)
        existing = self._segments.get(update.remote_log_segment_id.id)
        if existing is None:
            raise RemoteResourceNotFoundError(
                f"no remote log segment metadata found for {update.remote_log_segment_id}")
        return existing.create_with_updates(update)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate
                                           ) -> RemoteLogSegmentMetadata:
        """Moves a segment to `update.state`; returns its new metadata."""
        metadata = self.check_update(update)
        segment_id = metadata.remote_log_segment_id.id
        state = metadata.state
        for epoch, start in metadata.leader_epochs:
            epoch_state = self._epoch_state(epoch)
            if state == _S.COPY_SEGMENT_FINISHED:
                epoch_state.on_copy_finished(start, segment_id, _epoch_end(metadata, epoch))
            elif state == _S.DELETE_SEGMENT_STARTED:
                epoch_state.on_delete_started(start, segment_id)
            else:
                epoch_state.on_delete_finished(segment_id)
        if state == _S.DELETE_SEGMENT_FINISHED:
            del self._segments[segment_id]
        else:
            self._segments[segment_id] = metadata
        return metadata

    def check_partition_delete(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Raises what put_partition_delete_metadata would raise; changes nothing."""
        self._check_partition(metadata.topic_id_partition)
        check_partition_delete_transition(self.partition_delete_state, metadata.state,
                                          str(self.topic_id_partition))

    def put_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        """Records a deletion step; DELETE_PARTITION_FINISHED purges every segment."""
        self.check_partition_delete(metadata)
        self._delete_metadata = metadata
        if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
            self._segments.clear()
            self._epochs.clear()

    # ---- queries -------------------------------------------------------------------------

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int
                                    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding `offset` of `leader_epoch`, or None."""
        epoch_state = self._epochs.get(leader_epoch)
        if epoch_state is None:
            return None
        segment_id = epoch_state.floor_segment_id(offset)
        if segment_id is None:
            return None
        metadata = self._segments[segment_id]
        return None if offset > _epoch_end(metadata, leader_epoch) else metadata

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The highest offset of `leader_epoch` copied to remote storage, or None."""
        epoch_state = self._epochs.get(leader_epoch)
        return None if epoch_state is None else epoch_state.highest_offset

    def list_remote_log_segments(self, leader_epoch: int) -> list[RemoteLogSegmentMetadata]:
        """The segments holding offsets of `leader_epoch` (every state but
        DELETE_SEGMENT_FINISHED), by start offset."""
        epoch_state = self._epochs.get(leader_epoch)
        if epoch_state is None:
            return []
        return sorted((self._segments[i] for i in epoch_state.segment_ids()),
                      key=_start_offset)

    def list_all_remote_log_segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment not yet DELETE_SEGMENT_FINISHED, by start offset (ties: the order
        they were added)."""
        return sorted(self._segments.values(), key=_start_offset)

    def segment(self, segment_id: RemoteLogSegmentId) -> RemoteLogSegmentMetadata | None:
        if segment_id.topic_id_partition != self.topic_id_partition:
            return None
        return self._segments.get(segment_id.id)

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def partition_delete_metadata(self) -> RemotePartitionDeleteMetadata | None:
        return self._delete_metadata

    @property
    def partition_delete_state(self) -> RemotePartitionDeleteState | None:
        return None if self._delete_metadata is None else self._delete_metadata.state

    # ---- snapshot export / import --------------------------------------------------------

    def segments_in_order(self) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment in the order it was first added (the order a snapshot keeps)."""
        return iter(list(self._segments.values()))

    def epoch_states(self) -> list[EpochStateSnapshot[RemoteLogSegmentId]]:
        """Every epoch's state, ascending, with full segment ids."""
        out = []
        for epoch, state in sorted(self._epochs.items()):
            raw = state.export(epoch)
            out.append(EpochStateSnapshot(
                epoch, raw.highest_offset,
                tuple((start, self._full_id(i)) for start, i in raw.referenced),
                tuple(self._full_id(i) for i in raw.unreferenced)))
        return out

    def _full_id(self, uuid: Uuid) -> RemoteLogSegmentId:
        return RemoteLogSegmentId(self.topic_id_partition, uuid)

    @classmethod
    def restore(cls, topic_id_partition: TopicIdPartition,
                segments: list[RemoteLogSegmentMetadata],
                epoch_states: list[EpochStateSnapshot[RemoteLogSegmentId]],
                delete_metadata: RemotePartitionDeleteMetadata | None
                ) -> RemoteLogMetadataCache:
        """A cache exactly as exported. ValueError when the parts disagree (an epoch state
        naming a segment that is not there, or a segment of another partition)."""
        cache = cls(topic_id_partition)
        for metadata in segments:
            cache._check_partition(metadata.topic_id_partition)
            cache._segments[metadata.remote_log_segment_id.id] = metadata
        for snapshot in epoch_states:
            for segment_id in [i for _, i in snapshot.referenced] + list(snapshot.unreferenced):
                if cache.segment(segment_id) is None:
                    raise ValueError(f"epoch {snapshot.epoch} names segment {segment_id}, "
                                     "which is not in the snapshot")
            cache._epochs[snapshot.epoch] = RemoteLogLeaderEpochState.restore(EpochStateSnapshot(
                snapshot.epoch, snapshot.highest_offset,
                tuple((start, i.id) for start, i in snapshot.referenced),
                tuple(i.id for i in snapshot.unreferenced)))
        if delete_metadata is not None:
            cache._check_partition(delete_metadata.topic_id_partition)
        cache._delete_metadata = delete_metadata
        return cache

    # ---- helpers -------------------------------------------------------------------------

    def _epoch_state(self, epoch: int) -> RemoteLogLeaderEpochState[Uuid]:
        state = self._epochs.get(epoch)
        if state is None:
            state = self._epochs[epoch] = RemoteLogLeaderEpochState()
        return state

    def _check_partition(self, topic_id_partition: TopicIdPartition) -> None:
        if topic_id_partition != self.topic_id_partition:
            raise ValueError(f"event for {topic_id_partition} given to the cache of "
                             f"{self.topic_id_partition}")


def _start_offset(metadata: RemoteLogSegmentMetadata) -> int:
    return metadata.start_offset
