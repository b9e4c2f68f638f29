"""KIP-405 metadata types: what the RemoteLogMetadataManager stores about remote segments.

Names, fields and state ids follow Kafka's `org.apache.kafka.server.log.remote.storage`
types, so a record can be compared field by field with what a broker would write.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from engine.common import Uuid
from engine.errors import IllegalStateTransitionError

__all__ = [
    "TopicIdPartition",
    "RemoteLogSegmentId",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteState",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemotePartitionDeleteMetadata",
    "IllegalStateTransitionError",
]


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition named both by its topic's Uuid and by (topic, partition)."""

    topic_id: Uuid
    topic: str
    partition: int
    # every read looks partitions up in several dicts: the hash is computed once (a
    # string's hash differs between processes, so it is never pickled: __reduce__)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.topic_id, Uuid):
            object.__setattr__(self, "topic_id", Uuid.from_string(str(self.topic_id)))
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        object.__setattr__(self, "_hash", hash((self.topic_id, self.topic, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, TopicIdPartition):
            return NotImplemented
        return (self._hash == other._hash and self.partition == other.partition
                and self.topic == other.topic and self.topic_id == other.topic_id)

    def __reduce__(self):
        return (TopicIdPartition, (self.topic_id, self.topic, self.partition))

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __str__(self):
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """One copy attempt of one segment: a fresh random `id` is drawn for every attempt."""

    topic_id_partition: TopicIdPartition
    id: Uuid

    @classmethod
    def generate_new(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, Uuid.random())

    def __hash__(self) -> int:
        # `id` is drawn fresh for every attempt: hashing it alone keeps the per-read cache
        # lookups keyed by segment cheap (equality still compares both fields)
        return hash(self.id)

    def __str__(self):
        return f"RemoteLogSegmentId{{{self.topic_id_partition}, id={self.id}}}"


class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's segment states with their byte ids."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def is_valid_transition(source: RemoteLogSegmentState | None,
                            target: RemoteLogSegmentState) -> bool:
        """Kafka's rule: None -> COPY_SEGMENT_STARTED only; any state -> itself; STARTED ->
        FINISHED or DELETE_STARTED; FINISHED -> DELETE_STARTED; DELETE_STARTED ->
        DELETE_FINISHED."""
        s = RemoteLogSegmentState
        if source is None:
            return target == s.COPY_SEGMENT_STARTED
        if source == target:
            return True
        return target in _SEGMENT_NEXT[source]


_SEGMENT_NEXT = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: (RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: (),
}


class RemotePartitionDeleteState(enum.IntEnum):
    """Kafka's partition-deletion states: linear, self transitions allowed."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @staticmethod
    def is_valid_transition(source: RemotePartitionDeleteState | None,
                            target: RemotePartitionDeleteState) -> bool:
        if source is None:
            return target == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        return target == source or target == source + 1


def _check_transition(kind, source, target, what) -> None:
    if not kind.is_valid_transition(source, target):
        name = "None" if source is None else source.name
        raise IllegalStateTransitionError(
            f"illegal state transition {name} -> {target.name} for {what}")


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of a segment already added (Kafka's update record)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self):
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("an update cannot carry COPY_SEGMENT_STARTED: that state is "
                             "given by adding the segment's metadata")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """A remote segment: offsets [start_offset, end_offset] (both inclusive), its leader
    epochs (epoch -> first offset of that epoch in the segment, ascending, the first one
    clamped to start_offset), its size and state."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int] = field(hash=False)
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False
    _epochs: tuple[tuple[int, int], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        if self.start_offset < 0:
            raise ValueError(f"start_offset must be >= 0, got {self.start_offset}")
        if self.end_offset < self.start_offset:
            raise ValueError(f"end_offset {self.end_offset} must be >= start_offset "
                             f"{self.start_offset}")
        if not 0 <= self.segment_size_in_bytes <= 2**31 - 1:
            raise ValueError(f"segment_size_in_bytes {self.segment_size_in_bytes} does not "
                             "fit an int32")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")
        epochs = tuple(sorted((int(e), int(o)) for e, o in self.segment_leader_epochs.items()))
        object.__setattr__(self, "_epochs", epochs)
        # a plain dict (picklable for Spark tasks); treat it as read-only
        object.__setattr__(self, "segment_leader_epochs", dict(epochs))
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))
        if self.custom_metadata is not None:
            object.__setattr__(self, "custom_metadata", bytes(self.custom_metadata))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def leader_epochs(self) -> tuple[tuple[int, int], ...]:
        """(epoch, start offset) pairs in ascending epoch order."""
        return self._epochs

    @property
    def first_epoch(self) -> int:
        return self._epochs[0][0]

    @property
    def last_epoch(self) -> int:
        return self._epochs[-1][0]

    def create_with_updates(self, update: RemoteLogSegmentMetadataUpdate
                            ) -> RemoteLogSegmentMetadata:
        """This metadata after `update` (its id must match; the transition must be legal).

        Raises:
            IllegalStateTransitionError: a transition Kafka refuses.
            ValueError: the update is for another segment.
        """
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(f"update for {update.remote_log_segment_id} applied to "
                             f"{self.remote_log_segment_id}")
        if not RemoteLogSegmentState.is_valid_transition(self.state, update.state):
            _check_transition(RemoteLogSegmentState, self.state, update.state,
                              str(self.remote_log_segment_id))
        return replace(self, state=update.state, event_timestamp_ms=update.event_timestamp_ms,
                       broker_id=update.broker_id,
                       custom_metadata=(update.custom_metadata
                                        if update.custom_metadata is not None
                                        else self.custom_metadata),
                       segment_leader_epochs=dict(self._epochs))


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A step of deleting a whole partition's remote data."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def __post_init__(self):
        object.__setattr__(self, "state", RemotePartitionDeleteState(self.state))


def check_segment_transition(source: RemoteLogSegmentState | None,
                             target: RemoteLogSegmentState, what: str) -> None:
    """Raises IllegalStateTransitionError unless Kafka allows `source` -> `target`."""
    _check_transition(RemoteLogSegmentState, source, target, what)


def check_partition_delete_transition(source: RemotePartitionDeleteState | None,
                                      target: RemotePartitionDeleteState, what: str) -> None:
    """Raises IllegalStateTransitionError unless Kafka allows `source` -> `target`."""
    _check_transition(RemotePartitionDeleteState, source, target, what)
