"""The local tier: Kafka-compatible segment files and partition directories.

Indexes (`OffsetIndex`, `TimeIndex`, `TransactionIndex`), producer-state snapshots and the
text checkpoint files, byte-compatible with Kafka's; segments (`LogSegment`) and one
partition directory's log (`UnifiedLog`, composed of `LocalLog`, `LogLoader` and
`LogRetention`) with its leader-epoch cache (`LeaderEpochFileCache`) and producer state
(`ProducerStateManager`), and the logs of several log dirs (`LogManager`).
Searches run natively without the GIL.
"""

from engine._native.index import IndexFullError
from engine.log.checkpoint import (
    CheckpointFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadata,
    PartitionMetadataFile,
    epoch_entries_in_range,
    epoch_for_offset,
)
from engine.log.index_rebuild import rebuild_indexes
from engine.log.leader_epoch import LeaderEpochFileCache
from engine.log.log_manager import LogManager
from engine.log.offset_index import OffsetIndex, OffsetPosition
from engine.log.producer_state import (
    ProducerSnapshotEntry,
    ProducerStateManager,
    read_snapshot,
    write_snapshot,
)
from engine.log.segment import (
    FetchDataInfo,
    LogSegment,
    LogSegmentOffsetOverflowError,
    TimestampAndOffset,
)
from engine.log.time_index import TimeIndex, TimestampOffset
from engine.log.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult
from engine.log.unified_log import LogStartOffsetIncrementReason, UnifiedLog

__all__ = [
    "AbortedTxn",
    "CheckpointFile",
    "EpochEntry",
    "FetchDataInfo",
    "IndexFullError",
    "LeaderEpochCheckpointFile",
    "LeaderEpochFileCache",
    "LogManager",
    "LogSegment",
    "LogSegmentOffsetOverflowError",
    "LogStartOffsetIncrementReason",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "OffsetPosition",
    "PartitionMetadata",
    "PartitionMetadataFile",
    "ProducerSnapshotEntry",
    "ProducerStateManager",
    "TimeIndex",
    "TimestampAndOffset",
    "TimestampOffset",
    "TransactionIndex",
    "TxnIndexSearchResult",
    "UnifiedLog",
    "epoch_entries_in_range",
    "epoch_for_offset",
    "read_snapshot",
    "rebuild_indexes",
    "write_snapshot",
]
