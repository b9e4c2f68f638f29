"""KIP-405 tiered storage: metadata types, the RemoteStorageManager and
RemoteLogMetadataManager interfaces, and their implementations."""

from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.remote.metadata_manager import RemoteLogMetadataManager
from engine.remote.storage import IndexType, LogSegmentData, RemoteStorageManager

__all__ = [
    "IllegalStateTransitionError",
    "IndexType",
    "LogSegmentData",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageManager",
    "TopicIdPartition",
]
