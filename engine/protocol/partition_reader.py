"""What `serve`'s ReadBroker (engine.protocol.broker) needs of the partitions it answers for:
the PartitionReader protocol, in Kafka's terms the part of the MetadataCache (topics, ids,
partitions, leader epochs) and of the ReplicaManager (fetchMessages, fetchOffsetForTimestamp,
legacyFetchOffsetsForTimestamp, each partition's offsets) that KafkaApis asks for its read
APIs. Two implement it: engine.protocol.log_reader.LogReader (a broker's log dirs, read
through the RemoteLogManager) and engine.protocol.replica.BucketReplica (a bucket alone).
What only some readers can answer is a capability of its own (TopicConfigs).

Each partition is named by (topic, partition). Errors of one partition are the engine's typed
errors (engine.errors): ReadBroker turns them into Kafka's codes (engine.protocol.errors).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from engine.common import Uuid

__all__ = ["EARLIEST", "EARLIEST_LOCAL", "LATEST", "LATEST_TIERED", "MAX_TIMESTAMP",
           "FetchPartitionData", "LogOffsets", "PartitionReader", "TopicConfigs", "cluster_id_of"]

#: ListOffsets specs (ListOffsetsRequest): latest, earliest, max timestamp, earliest local,
#: latest tiered
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


class LogOffsets(Protocol):
    """A partition's offsets as a fetch response carries them (Kafka's LogOffsetSnapshot):
    the log start offset, the log end offset, the high watermark (the end a read_uncommitted
    consumer sees) and the last stable offset (where a read_committed consumer stops)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


@dataclass(frozen=True)
class FetchPartitionData:
    """One partition's answer to a fetch (Kafka's FetchPartitionData).

    `error` set: the partition's error, nothing else counts; `offsets` None: the partition
    is not here (any more). Otherwise `records` are whole batches from the fetch offset
    (empty for a remote read that outlasted its wait: Kafka's expired DelayedRemoteFetch,
    answered with no error and no records), `offsets` the partition's offsets the read saw
    or later ones, and `aborted_transactions` the aborted transactions
    the records overlap (read_committed), None when the read has no list to give (the
    response then carries null). `local_segment`, when set, is the local segment the records
    are bytes of from `local_position` (LogSegment.file_region sends them with sendfile)."""

    error: Exception | None = None
    records: bytes | memoryview = b""
    offsets: LogOffsets | None = None
    aborted_transactions: Sequence[Any] | None = None
    local_segment: Any = None
    local_position: int = 0


class PartitionReader(Protocol):
    """The partitions a ReadBroker leads, and their reads (see the module docstring)."""

    #: the cluster id Metadata answers (22 characters, as Kafka's)
    cluster_id: str

    def topics(self) -> dict[str, list[int]]:
        """Every topic led here with its partitions, both sorted (the MetadataCache's topics
        and their partitions)."""
        ...

    def topic_id(self, topic: str) -> Uuid:
        """The topic's one id (Metadata's topic_id; Fetch v13+ names topics by it).
        UnknownTopicOrPartitionError when the topic is not here."""
        ...

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's current leader epoch (Metadata's leader_epoch, what a request's
        current_leader_epoch is checked against). UnknownTopicOrPartitionError when there is
        no such partition."""
        ...

    def log_offsets(self, topic: str, partition: int) -> LogOffsets | None:
        """The partition's offsets now (Kafka's Partition.fetchOffsetSnapshot), None when
        there is no such partition."""
        ...

    def fetch(self, requests: Sequence[tuple[str, int, int, int]],
              read_committed: bool) -> list[FetchPartitionData]:
        """Kafka's ReplicaManager.fetchMessages for the partitions of one Fetch: for each
        (topic, partition, fetch offset, max bytes), whole batches from the fetch offset, the
        first one whole even past max bytes (KIP-74: a consumer must make progress), cut at
        the last stable offset for read_committed and at the high watermark otherwise. Never
        raises for one partition: its answer carries the error."""
        ...

    def list_offset(self, topic: str, partition: int, spec: int,
                    read_committed: bool) -> tuple[int, int, int]:
        """ListOffsets v1+ of one partition (Kafka's fetchOffsetForTimestamp): (timestamp,
        offset, leader epoch) for `spec`, a timestamp in ms or one of ListOffsetsRequest's
        specs (-1 latest: the high watermark, or the last stable offset for read_committed;
        -2 earliest: the log start offset; -3 max timestamp; -4 earliest local; -5 latest
        tiered); (-1, -1, -1) when no record answers it."""
        ...

    def legacy_offsets(self, topic: str, partition: int, timestamp: int, max_num: int,
                       from_consumer: bool) -> list[int]:
        """ListOffsets v0 of one partition (Kafka's legacyFetchOffsetsForTimestamp): the
        offsets before `timestamp` (-1 latest, -2 earliest), at most `max_num`, highest
        first; for a consumer none past the high watermark."""
        ...


@runtime_checkable
class TopicConfigs(Protocol):
    """A PartitionReader that knows its topics' configs, as a broker does (a bucket holds
    none): DescribeConfigs is served only by a ReadBroker whose reader is one."""

    def topic_config(self, topic: str, partition: int) -> Any:
        """The partition's topic config (engine.config.TopicConfig: each name with its
        resolved value and source). UnknownTopicOrPartitionError when there is no such
        partition."""
        ...


def cluster_id_of(names: Iterable) -> str:
    """A stable cluster id (22 characters, as Kafka's) derived from the names of where a
    reader's partitions are (its log dirs, its bucket's URL)."""
    digest = hashlib.sha256("\0".join(map(str, names)).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
