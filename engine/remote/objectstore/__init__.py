"""The object-store tier: a RemoteStorageManager over S3-compatible (and, through the same
client, GCS and Azure) object storage, in the Aiven tiered-storage plugin's on-bucket format,
so a bucket either writes the other reads.

- The I/O layer: the client (store), chunk-aligned parallel ranged reads with single-flight
  (reads), the chunk cache over memory and many disks (chunk_cache), and the tier's metrics
  (metrics). Nothing there knows the key layout or the manifest.
- The format: `keys`, `manifest`, `custom_metadata` (object keys, `.rsm-manifest`, KIP-917
  custom metadata) and `transforms` (per-chunk zstd and AES-256-GCM envelope encryption).
- `config`: the tier's settings in the plugin's names (RsmConfig; the store's StoreConfig and
  the caches' ChunkCacheConfig are read next to their code); `config_values` reads the
  typed values of the tier's and the store's keys.
- `segment_source`: what an upload reads from the broker's segment files (the `.log`'s
  chunks transformed ahead on a pool); `verdicts`: batch-CRC verdicts over cached chunks.
- `rsm`: ObjectStorageRemoteStorageManager, built on these.
"""

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
