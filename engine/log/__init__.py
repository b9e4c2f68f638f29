"""The local tier: Kafka-compatible segment files and partition directories.

Indexes (`OffsetIndex`, `TimeIndex`, `TransactionIndex`), producer-state snapshots and the
text checkpoint files, byte-compatible with Kafka's. Searches run natively without the GIL.
"""

from engine._native.index import IndexFullError
from engine.log.checkpoint import (
    CheckpointFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadata,
    PartitionMetadataFile,
    TopicPartition,
    Uuid,
    epoch_entries_in_range,
    epoch_for_offset,
)
from engine.log.index_rebuild import rebuild_indexes
from engine.log.offset_index import OffsetIndex, OffsetPosition
from engine.log.producer_state import ProducerSnapshotEntry, read_snapshot, write_snapshot
from engine.log.segment import (
    FetchDataInfo,
    LogSegment,
    LogSegmentOffsetOverflowError,
    TimestampAndOffset,
)
from engine.log.time_index import TimeIndex, TimestampOffset
from engine.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

__all__ = [
    "AbortedTxn",
    "CheckpointFile",
    "EpochEntry",
    "FetchDataInfo",
    "IndexFullError",
    "LeaderEpochCheckpointFile",
    "LogSegment",
    "LogSegmentOffsetOverflowError",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "OffsetPosition",
    "PartitionMetadata",
    "PartitionMetadataFile",
    "ProducerSnapshotEntry",
    "TimeIndex",
    "TimestampAndOffset",
    "TimestampOffset",
    "TopicPartition",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "Uuid",
    "epoch_entries_in_range",
    "epoch_for_offset",
    "read_snapshot",
    "rebuild_indexes",
    "write_snapshot",
]
