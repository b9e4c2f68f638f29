"""KIP-405's RemoteLogMetadataManager (RLMM) plugin interface.

The RLMM records the lifecycle of remote segments and answers which remote segment holds an
offset of a leader epoch. It is configured with the broker properties under
`remote.log.metadata.manager.impl.prefix` (`rlmm.config.` by default), the prefix stripped,
plus `broker.id` and `log.dir` (the first log dir).

Kafka returns futures that complete once the event is durable and visible; here the
mutating calls return once the event is durable (written and fsynced) and applied, so a
caller may act on it right after the call.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping

from engine.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

__all__ = ["RemoteLogMetadataManager"]


class RemoteLogMetadataManager(abc.ABC):
    """Implementations are thread-safe. Illegal state transitions raise
    IllegalStateTransitionError and change nothing."""

    #: whether the query methods answer from memory, never waiting on storage or network:
    #: the RLM then serves remote reads that need no other I/O on the caller's thread
    in_memory_queries: bool = False

    def configure(self, configs: Mapping[str, str]) -> None:
        """Takes the `rlmm.config.`-prefixed broker properties (prefix stripped), plus
        `broker.id` and `log.dir`. Raises ConfigError for a bad value."""

    @abc.abstractmethod
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Adds a segment in state COPY_SEGMENT_STARTED (anything else is refused)."""

    @abc.abstractmethod
    def update_remote_log_segment_metadata(self,
                                           update: RemoteLogSegmentMetadataUpdate) -> None:
        """Moves an added segment to a new state. Raises RemoteResourceNotFoundError for an
        unknown segment id."""

    @abc.abstractmethod
    def remote_log_segment_metadata(self, topic_id_partition: TopicIdPartition,
                                    epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding `offset` written in leader epoch
        `epoch_for_offset`, or None."""

    @abc.abstractmethod
    def highest_offset_for_epoch(self, topic_id_partition: TopicIdPartition,
                                 leader_epoch: int) -> int | None:
        """The highest offset of `leader_epoch` held by copied (FINISHED) segments, or
        None."""

    @abc.abstractmethod
    def put_remote_partition_delete_metadata(self,
                                             metadata: RemotePartitionDeleteMetadata) -> None:
        """Records a partition-deletion step (MARKED -> STARTED -> FINISHED)."""

    @abc.abstractmethod
    def list_remote_log_segments(self, topic_id_partition: TopicIdPartition,
                                 leader_epoch: int | None = None
                                 ) -> Iterator[RemoteLogSegmentMetadata]:
        """The partition's segments in COPY_SEGMENT_STARTED, COPY_SEGMENT_FINISHED or
        DELETE_SEGMENT_STARTED, ordered by start offset; with `leader_epoch`, only those
        holding offsets of that epoch."""

    def remote_log_size(self, topic_id_partition: TopicIdPartition, leader_epoch: int) -> int:
        """Bytes of the FINISHED segments holding offsets of `leader_epoch`."""
        return sum(m.segment_size_in_bytes
                   for m in self.list_remote_log_segments(topic_id_partition, leader_epoch)
                   if m.state.name == "COPY_SEGMENT_FINISHED")

    @abc.abstractmethod
    def on_partition_leadership_changes(self, leader_partitions: Iterable[TopicIdPartition],
                                        follower_partitions: Iterable[TopicIdPartition]
                                        ) -> None:
        """Starts serving (loading the metadata of) these partitions."""

    @abc.abstractmethod
    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        """Stops serving these partitions (their metadata stays stored)."""

    def is_ready(self, topic_id_partition: TopicIdPartition) -> bool:
        """Whether the partition's metadata is loaded and queries answer (KIP-1105)."""
        return True

    def partition_error(self, topic_id_partition: TopicIdPartition) -> Exception | None:
        """Why the partition's metadata cannot be served, or None. A partition with an
        error is offline: its calls raise that error, the other partitions work on."""
        return None

    def offline_partitions(self) -> dict[TopicIdPartition, Exception]:
        """The partitions known to be offline, with their errors."""
        return {}

    def list_partitions(self) -> list[TopicIdPartition]:
        """The partitions with stored metadata, for callers that must find a partition the
        local logs no longer name (deleting it, listing the tier); empty when the plugin
        cannot list them."""
        return []

    def partition_delete_state(self, topic_id_partition: TopicIdPartition
                               ) -> RemotePartitionDeleteState | None:
        """The partition's deletion state, or None when none was recorded (or the plugin
        does not keep it)."""
        return None

    def close(self) -> None:
        """Releases resources. Idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
