"""The object-store tier's I/O layer: the client (store), chunk-aligned parallel ranged
reads with single-flight (reads), the chunk cache over memory and many disks (chunk_cache),
and the tier's metrics (metrics). The on-bucket format and the RemoteStorageManager are built
on these; nothing here knows the key layout or the manifest."""

from engine.remote.objectstore.chunk_cache import (
    CHUNK_CACHE_CONFIG_KEYS,
    ChunkCache,
    ChunkCacheConfig,
    ChunkKey,
    LoadingCache,
)
from engine.remote.objectstore.metrics import ObjectStoreMetrics
from engine.remote.objectstore.reads import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_REQUEST_BYTES,
    ChunkRanges,
    Detransform,
    RangeReader,
    SegmentObject,
)
from engine.remote.objectstore.store import (
    STORE_CONFIG_KEYS,
    ObjectInfo,
    ObjectStore,
    StoreConfig,
    TokenBucket,
)

__all__ = [
    "CHUNK_CACHE_CONFIG_KEYS",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_REQUEST_BYTES",
    "STORE_CONFIG_KEYS",
    "ChunkCache",
    "ChunkCacheConfig",
    "ChunkKey",
    "ChunkRanges",
    "Detransform",
    "LoadingCache",
    "ObjectInfo",
    "ObjectStore",
    "ObjectStoreMetrics",
    "RangeReader",
    "SegmentObject",
    "StoreConfig",
    "TokenBucket",
]
