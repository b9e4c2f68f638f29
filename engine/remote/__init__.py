"""KIP-405 tiered storage: metadata types, the RemoteStorageManager and
RemoteLogMetadataManager interfaces, and their implementations."""

from engine.errors import (
    CorruptRemoteLogMetadataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.factory import (
    create_remote_log_metadata_manager,
    create_remote_storage_manager,
)
from engine.remote.filesystem import FileSystemRemoteStorageManager
from engine.remote.index_cache import RemoteIndexCache, RemoteIndexCacheEntry
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
from engine.remote.metadata_cache import RemoteLogMetadataCache
from engine.remote.metadata_manager import RemoteLogMetadataManager
from engine.remote.storage import IndexType, LogSegmentData, RemoteStorageManager

__all__ = [
    "CorruptRemoteLogMetadataError",
    "EmbeddedRemoteLogMetadataManager",
    "FileSystemRemoteStorageManager",
    "IllegalStateTransitionError",
    "IndexType",
    "LogSegmentData",
    "RemoteIndexCache",
    "RemoteIndexCacheEntry",
    "RemoteLogMetadataCache",
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
    "create_remote_log_metadata_manager",
    "create_remote_storage_manager",
]
