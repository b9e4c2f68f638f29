"""`ObjectStorageRemoteStorageManager`: the object-store tier, in the Aiven plugin's format.

Selected with `remote.log.storage.manager.class.name=engine.remote.ObjectStorageRemoteStorageManager`
or the plugin's own `io.aiven.kafka.tieredstorage.RemoteStorageManager`; configured with the
plugin's names under `rsm.config.` (see `RSM_CONFIG_KEYS` and the store's
`STORE_CONFIG_KEYS`), so a broker file written for the plugin loads unchanged. An unknown key
or a bad value fails `configure` with a ConfigError naming the key; secrets (the store's
credentials) never appear in errors, logs or `repr`.

Copy (`copy_log_segment_data`), in the plugin's order:

1. `.log`: the segment read in `chunk.size` chunks, each transformed (see `transforms`), and
   streamed into a multipart upload (parts in parallel, the shared upload rate limit): the
   segment is never whole in memory. Plain mode (no compression, no encryption) uploads the
   file itself, so the object is byte-identical to the Kafka segment.
2. `.indexes`: offset, time, producer-snapshot, leader-epoch and (when the segment has one)
   transaction index, each encrypted whole when encryption is on, concatenated; an empty
   index takes no bytes.
3. `.rsm-manifest` last: a manifest present means the other two objects are.

Any failure deletes the three keys (one batched delete) and raises RemoteStorageError; a
retried copy of the same segment id overwrites. The data key is drawn and wrapped before
anything is written, and every key file was loaded and checked at `configure`, so a bad key
never leaves objects behind. The copy returns the custom metadata that
`custom.metadata.fields.include` asks for (none by default).

Reads go through the manifest (cached: `fetch.manifest.cache.size` entries for
`fetch.manifest.cache.retention.ms`): a byte range of the `.log` becomes the chunks holding
it, fetched as coalesced ranged GETs with several in flight, each chunk detransformed and
checked (a bad GCM tag, zstd frame or size is a CorruptRemoteObjectError naming the object
and chunk), then cut to the range. Indexes are one ranged GET of `.indexes` each, cached
(`fetch.indexes.cache.size` bytes for `fetch.indexes.cache.retention.ms`). When the segment's
custom metadata names an object prefix or key, reads of `.log` and `.indexes` use them.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import concurrent.futures
import difflib
import io
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from engine.config import ConfigError
from engine.errors import (
    CorruptRemoteObjectError,
    KafkaEngineError,
    RemoteEncryptionKeyError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.objectstore import custom_metadata as cm
from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST, ObjectKeyFactory, main_path
from engine.remote.objectstore.manifest import (
    GCM_OVERHEAD,
    MAX_MANIFEST_BYTES,
    Chunk,
    FixedChunkIndex,
    SegmentIndex,
    SegmentIndexes,
    SegmentManifest,
    VariableChunkIndex,
)
from engine.remote.objectstore.store import STORE_CONFIG_KEYS, ObjectStore, StoreConfig
from engine.remote.objectstore.transforms import ChunkTransform, KeyRing, first_batch_compressed
from engine.remote.storage import IndexType, LogSegmentData, RemoteStorageManager

__all__ = [
    "CHUNK_CACHE_CLASS_ALIASES",
    "RSM_CONFIG_KEYS",
    "ObjectStorageRemoteStorageManager",
    "RsmConfig",
]

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
MiB = 1024 * 1024

#: The plugin's chunk cache classes and the engine's names for its caches.
CHUNK_CACHE_CLASS_ALIASES = {
    "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache": "memory",
    "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache": "disk",
    "memory": "memory",
    "disk": "disk",
}
_CHUNK_CACHE_KEYS = frozenset(f"fetch.chunk.cache.{k}" for k in (
    "class", "size", "retention.ms", "prefetch.max.size", "get.timeout.ms", "thread.pool.size",
    "path"))
#: The keys this class reads itself (names under `rsm.config.`); the store reads
#: STORE_CONFIG_KEYS. `encryption.key.pairs.<id>.{public,private}.key.file` come on top.
RSM_CONFIG_KEYS = frozenset({
    "broker.id", "key.prefix", "key.prefix.mask", "chunk.size", "compression.enabled",
    "compression.heuristic.enabled", "encryption.enabled", "encryption.key.pair.id",
    "encryption.key.pairs", "custom.metadata.fields.include", "segment.format",
    "fetch.manifest.cache.size", "fetch.manifest.cache.retention.ms",
    "fetch.indexes.cache.size", "fetch.indexes.cache.retention.ms",
    "fetch.parallel.requests", "fetch.coalesce.max.bytes",
    "metrics.num.samples", "metrics.sample.window.ms", "metrics.recording.level",
}) | _CHUNK_CACHE_KEYS
_KEY_FILE_SUFFIXES = (".public.key.file", ".private.key.file")
# the plugin's default of `fetch.indexes.cache.size` (bytes) and of the manifest cache
_INDEX_CACHE_BYTES = 10 * MiB
_MANIFEST_CACHE_ENTRIES = 1000


# ---- configuration -----------------------------------------------------------------------

@dataclass(frozen=True)
class RsmConfig:
    """The tier's own settings (the store's are in `StoreConfig`)."""

    key_prefix: str = ""
    chunk_size: int = 4 * MiB
    compression: bool = False
    compression_heuristic: bool = False
    encryption: bool = False
    key_pair_id: str | None = None
    key_files: tuple[tuple[str, str, str], ...] = ()
    custom_metadata_fields: tuple[int, ...] = ()
    manifest_cache_size: int = _MANIFEST_CACHE_ENTRIES
    manifest_cache_retention_ms: int = 3_600_000
    index_cache_bytes: int = _INDEX_CACHE_BYTES
    index_cache_retention_ms: int = 600_000
    chunk_cache_class: str | None = None
    fetch_parallel_requests: int = 4
    fetch_coalesce_max_bytes: int = 32 * MiB
    broker_id: int = -1

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> RsmConfig:
        """ConfigError naming the first unknown or bad key."""
        _check_unknown_keys(configs)

        def get(key):
            v = configs.get(key)
            return None if v is None or str(v).strip() == "" else str(v).strip()

        def integer(key, default, lo, hi):
            raw = get(key)
            if raw is None:
                if default is None:
                    raise ConfigError(key, None, "required")
                return default
            try:
                v = int(raw)
            except ValueError:
                raise ConfigError(key, raw, "expected an integer") from None
            if not lo <= v <= hi:
                raise ConfigError(key, raw, f"must be in [{lo}, {hi}]")
            return v

        def boolean(key, default=False):
            raw = get(key)
            if raw is None:
                return default
            if raw.lower() not in ("true", "false"):
                raise ConfigError(key, raw, "expected true or false")
            return raw.lower() == "true"

        def listing(key):
            raw = get(key)
            return [] if raw is None else [p.strip() for p in raw.split(",") if p.strip()]

        fmt = get("segment.format")
        if fmt is not None and fmt.lower() != "kafka":
            raise ConfigError("segment.format", fmt, "only the kafka segment format is "
                                                     "supported (not iceberg)")
        compression = boolean("compression.enabled")
        heuristic = boolean("compression.heuristic.enabled")
        if heuristic and not compression:
            raise ConfigError("compression.heuristic.enabled", get(
                "compression.heuristic.enabled"), "needs compression.enabled=true")
        encryption = boolean("encryption.enabled")
        key_pair_id, key_files = None, ()
        if encryption:
            key_pair_id = get("encryption.key.pair.id")
            if key_pair_id is None:
                raise ConfigError("encryption.key.pair.id", None,
                                  "required with encryption.enabled=true")
            ids = listing("encryption.key.pairs")
            if key_pair_id not in ids:
                raise ConfigError("encryption.key.pairs", get("encryption.key.pairs"),
                                  f"must list the encryption key pair {key_pair_id!r} "
                                  "(encryption.key.pair.id)")
            files = []
            for key_id in ids:
                paths = []
                for kind in ("public", "private"):
                    key = f"encryption.key.pairs.{key_id}.{kind}.key.file"
                    path = get(key)
                    if path is None:
                        raise ConfigError(key, None, f"required: the {kind} key file (PEM) "
                                                     f"of key pair {key_id!r}")
                    paths.append(path)
                files.append((key_id, paths[0], paths[1]))
            key_files = tuple(files)
        fields = []
        for name in listing("custom.metadata.fields.include"):
            if name not in cm.FIELD_NAMES:
                raise ConfigError("custom.metadata.fields.include",
                                  get("custom.metadata.fields.include"),
                                  f"{name!r} is not one of {', '.join(cm.FIELD_NAMES)}")
            fields.append(cm.FIELD_NAMES[name])
        cache_class = get("fetch.chunk.cache.class")
        if cache_class is not None and cache_class not in CHUNK_CACHE_CLASS_ALIASES:
            raise ConfigError("fetch.chunk.cache.class", cache_class,
                              f"one of {', '.join(CHUNK_CACHE_CLASS_ALIASES)}")
        prefix = configs.get("key.prefix")
        return cls(
            key_prefix="" if prefix is None else str(prefix),
            chunk_size=integer("chunk.size", None, 1, INT32_MAX // 2),
            compression=compression, compression_heuristic=heuristic, encryption=encryption,
            key_pair_id=key_pair_id, key_files=key_files,
            custom_metadata_fields=tuple(sorted(set(fields))),
            manifest_cache_size=integer("fetch.manifest.cache.size", _MANIFEST_CACHE_ENTRIES,
                                        0, 2**31 - 1),
            manifest_cache_retention_ms=integer("fetch.manifest.cache.retention.ms", 3_600_000,
                                                0, 2**62),
            index_cache_bytes=integer("fetch.indexes.cache.size", _INDEX_CACHE_BYTES, 0,
                                      2**62),
            index_cache_retention_ms=integer("fetch.indexes.cache.retention.ms", 600_000, 0,
                                             2**62),
            chunk_cache_class=None if cache_class is None
            else CHUNK_CACHE_CLASS_ALIASES[cache_class],
            fetch_parallel_requests=integer("fetch.parallel.requests", 4, 1, 64),
            fetch_coalesce_max_bytes=integer("fetch.coalesce.max.bytes", 32 * MiB, 1,
                                             INT32_MAX),
            broker_id=integer("broker.id", -1, -1, INT32_MAX),
        )


def _check_unknown_keys(configs: Mapping[str, str]) -> None:
    known = RSM_CONFIG_KEYS | STORE_CONFIG_KEYS
    for key in configs:
        if key in known:
            continue
        if key.startswith("encryption.key.pairs.") and key.endswith(_KEY_FILE_SUFFIXES):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = "[hidden]" if any(w in key for w in ("secret", "password", "token",
                                                      "credentials.json", "account.key")) \
            else configs[key]
        raise ConfigError(key, shown, f"unknown object-store tier config{hint}")


# ---- caches ------------------------------------------------------------------------------

class _TtlLru:
    """An LRU bounded by total weight, whose entries expire `retention_ms` after their last
    access (the plugin's expire-after-access caches)."""

    def __init__(self, max_weight: int, retention_ms: int, clock=time.monotonic):
        self._max, self._ttl, self._clock = max_weight, retention_ms / 1000.0, clock
        self._entries: OrderedDict = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._entries.get(key)
            if item is None:
                return None
            value, weight, stamp = item
            now = self._clock()
            if now - stamp > self._ttl:
                del self._entries[key]
                self._weight -= weight
                return None
            self._entries[key] = (value, weight, now)
            self._entries.move_to_end(key)
            return value

    def put(self, key, value, weight: int = 1) -> None:
        if weight > self._max:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._entries[key] = (value, weight, self._clock())
            self._weight += weight
            while self._weight > self._max:
                _, (_, w, _) = self._entries.popitem(last=False)
                self._weight -= w

    def discard(self, match) -> None:
        """Drops the entries whose key `match(key)` is true."""
        with self._lock:
            for key in [k for k in self._entries if match(k)]:
                self._weight -= self._entries.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weight = 0


@dataclass(frozen=True)
class _Segment:
    """What reads of one segment need: the manifest, its transforms and the object keys."""

    manifest: SegmentManifest
    transform: ChunkTransform
    manifest_key: str
    log_key: str
    indexes_key: str


# ---- the manager -------------------------------------------------------------------------

class ObjectStorageRemoteStorageManager(RemoteStorageManager):
    """The object-store tier (see the module docstring). Construct empty, then `configure`;
    or pass a ready `store` and `config` (tests, tools)."""

    def __init__(self, store: ObjectStore | None = None, config: RsmConfig | None = None,
                 key_ring: KeyRing | None = None):
        self._store = store
        self._config = config
        self._key_ring = key_ring
        self._keys = ObjectKeyFactory(config.key_prefix if config else "")
        self._closed = False
        self._setup_caches()

    def _setup_caches(self) -> None:
        cfg = self._config or RsmConfig()
        self._manifests = _TtlLru(cfg.manifest_cache_size, cfg.manifest_cache_retention_ms)
        self._indexes = _TtlLru(cfg.index_cache_bytes, cfg.index_cache_retention_ms)

    def configure(self, configs: Mapping[str, str]) -> None:
        """Reads the config (see the module docstring), loads and checks every key pair's
        PEM files, and opens the store. ConfigError naming the key for anything bad."""
        config = RsmConfig.from_configs(configs)
        store_config = StoreConfig.from_configs(configs)
        key_ring = None
        if config.encryption:
            key_ring = _load_key_ring(config)
        store = ObjectStore(store_config)
        self.close_store()
        self._store, self._config, self._key_ring = store, config, key_ring
        self._keys = ObjectKeyFactory(config.key_prefix)
        self._closed = False
        self._setup_caches()

    @property
    def store(self) -> ObjectStore:
        self._check_open()
        return self._store

    @property
    def config(self) -> RsmConfig:
        self._check_open()
        return self._config

    @property
    def keys(self) -> ObjectKeyFactory:
        return self._keys

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError("ObjectStorageRemoteStorageManager is closed")
        if self._store is None or self._config is None:
            raise RemoteStorageError("ObjectStorageRemoteStorageManager is not configured")

    # -- copy ----------------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              segment_data: LogSegmentData) -> bytes | None:
        """Uploads `.log`, `.indexes`, then the manifest (see the module docstring).
        Returns the configured custom metadata, or None. On any failure the segment's
        objects are deleted and RemoteStorageError (or the typed error) is raised."""
        self._check_open()
        cfg = self._config
        keys = {s: self._keys.key(metadata, s) for s in (LOG, INDEXES, MANIFEST)}
        self._drop_cached(metadata)
        try:
            file_size = _file_size(segment_data.log_segment)
            compress = file_size > 0 and cfg.compression and (
                not cfg.compression_heuristic
                or first_batch_compressed(segment_data.log_segment) is False)
            data_key = self._key_ring.new_data_key() if cfg.encryption else None
            transform = ChunkTransform(compress, data_key)
            chunk_index, log_bytes = self._upload_log(keys[LOG], segment_data.log_segment,
                                                      file_size, transform)
            indexes, index_bytes = self._upload_indexes(keys[INDEXES], segment_data,
                                                        transform)
            manifest = SegmentManifest(chunk_index, indexes, compress,
                                       None if data_key is None else data_key.metadata)
            manifest_bytes = self._store.upload(keys[MANIFEST], manifest.to_json(metadata),
                                                object_type="rsm-manifest")
        except BaseException as exc:
            self._delete_keys(list(keys.values()), quiet=True)
            if isinstance(exc, KafkaEngineError) or not isinstance(exc, Exception):
                raise
            raise _storage_error(exc, f"copy of {metadata.remote_log_segment_id} to "
                                      f"{self._store.url(keys[LOG])}") from exc
        return self._custom_metadata(metadata, log_bytes + index_bytes + manifest_bytes)

    def _upload_log(self, key: str, path, file_size: int, transform: ChunkTransform):
        c = self._config.chunk_size
        if transform.identity:
            written = self._store.upload(key, path, object_type="log")
            if written != file_size:
                raise RemoteStorageError(
                    f"segment {path} changed during its upload: {written} bytes sent, "
                    f"{file_size} expected", file=str(path))
            n = max(1, -(-file_size // c))
            last = file_size - (n - 1) * c
            return FixedChunkIndex(c, file_size, c, last), written
        sizes: list[int] = []
        written = self._store.upload(key, _transformed_chunks(path, file_size, c, transform,
                                                              sizes), object_type="log")
        if sum(sizes) != written or len(sizes) != (-(-file_size // c) if file_size else 0):
            raise RemoteStorageError(f"upload of {path} sent {written} bytes for "
                                     f"{len(sizes)} chunks", file=str(path))
        if transform.compression:
            return VariableChunkIndex(c, file_size, sizes), written
        extra = GCM_OVERHEAD if transform.data_key is not None else 0
        if not sizes:
            return FixedChunkIndex(c, 0, c + extra, 0), written
        return FixedChunkIndex(c, file_size, c + extra, sizes[-1]), written

    def _upload_indexes(self, key: str, data: LogSegmentData, transform: ChunkTransform):
        sources = [
            (IndexType.OFFSET, data.offset_index),
            (IndexType.TIMESTAMP, data.time_index),
            (IndexType.PRODUCER_SNAPSHOT, data.producer_snapshot),
            (IndexType.LEADER_EPOCH, bytes(data.leader_epoch_index)),
        ]
        txn = data.transaction_index
        has_txn = txn is not None and os.path.exists(txn)
        if has_txn:
            sources.append((IndexType.TRANSACTION, txn))
        parts, entries, position = [], {}, 0
        for index_type, source in sources:
            raw = _read_source(source)
            stored = transform.encrypt(raw) if raw else b""
            parts.append(stored)
            entries[index_type] = SegmentIndex(position, len(stored))
            position += len(stored)
        if position > INT32_MAX:
            raise RemoteStorageError(f"the indexes of segment {data.log_segment} take "
                                     f"{position} bytes, over int32", file=str(data.log_segment))
        indexes = SegmentIndexes(entries[IndexType.OFFSET], entries[IndexType.TIMESTAMP],
                                 entries[IndexType.PRODUCER_SNAPSHOT],
                                 entries[IndexType.LEADER_EPOCH],
                                 entries.get(IndexType.TRANSACTION))
        written = self._store.upload(key, b"".join(parts), object_type="indexes")
        return indexes, written

    def _custom_metadata(self, metadata, total: int) -> bytes | None:
        fields = self._config.custom_metadata_fields
        if not fields:
            return None
        values = {cm.REMOTE_SIZE: total, cm.OBJECT_PREFIX: self._keys.prefix,
                  cm.OBJECT_KEY: main_path(metadata)}
        return cm.encode_custom_metadata({f: values[f] for f in fields})

    # -- delete --------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Deletes the three objects in one batched request. Idempotent."""
        self._check_open()
        self._drop_cached(metadata)
        self._delete_keys([self._keys.key(metadata, s) for s in (LOG, INDEXES, MANIFEST)])

    def _delete_keys(self, keys: list[str], *, quiet: bool = False) -> None:
        try:
            self._store.delete(keys)
        except RemoteStorageError as exc:
            if not quiet:
                raise
            log.warning("could not delete %s after a failed copy: %s", keys[0], exc)

    def _drop_cached(self, metadata: RemoteLogSegmentMetadata) -> None:
        manifest_key = self._keys.key(metadata, MANIFEST)
        segment = f"-{metadata.remote_log_segment_id.id}."
        self._manifests.discard(lambda k: k[0] == manifest_key)
        self._indexes.discard(lambda k: segment in k[0])

    # -- reads ---------------------------------------------------------------------------

    def _segment(self, metadata: RemoteLogSegmentMetadata) -> _Segment:
        """The segment's manifest and transforms, from the cache or the bucket."""
        self._check_open()
        manifest_key = self._keys.key(metadata, MANIFEST)
        cache_key = (manifest_key, metadata.custom_metadata)  # it may move .log / .indexes
        cached = self._manifests.get(cache_key)
        if cached is not None:
            return cached
        data = self._store.get(manifest_key, max_bytes=MAX_MANIFEST_BYTES)
        manifest = SegmentManifest.parse(data, manifest_key)
        manifest.check_transformed_sizes(manifest_key)
        data_key = None
        if manifest.encryption is not None:
            if self._key_ring is None:
                raise RemoteEncryptionKeyError(
                    f"segment manifest {manifest_key}: the segment is encrypted with key pair "
                    f"{manifest.encryption.key_id!r}, but encryption is not configured "
                    "(encryption.enabled, encryption.key.pairs)",
                    key_id=manifest.encryption.key_id, object_key=manifest_key)
            data_key = self._key_ring.unwrap(manifest.encryption, manifest_key)
        segment = _Segment(manifest, ChunkTransform(manifest.compression, data_key),
                           manifest_key, self._read_key(metadata, LOG),
                           self._read_key(metadata, INDEXES))
        self._manifests.put(cache_key, segment)
        return segment

    def _read_key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        if metadata.custom_metadata is None:
            return self._keys.key(metadata, suffix)
        try:
            fields = cm.decode_custom_metadata(metadata.custom_metadata)
        except ValueError as exc:
            raise CorruptRemoteObjectError(
                f"custom metadata of {metadata.remote_log_segment_id} is not the object-store "
                f"tier's: {exc}", object_key=self._keys.key(metadata, MANIFEST)) from None
        return self._keys.key_for_read(metadata, suffix, fields.get(cm.OBJECT_PREFIX),
                                       fields.get(cm.OBJECT_KEY))

    def segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        """Original bytes of the segment's `.log`, from its manifest."""
        return self._segment(metadata).manifest.chunk_index.original_file_size

    def read_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                   end_exclusive: int) -> bytes:
        """`.log` bytes [start, end_exclusive); RemoteStorageError for a range outside the
        segment."""
        segment = self._segment(metadata)
        size = segment.manifest.chunk_index.original_file_size
        _check_range(start, end_exclusive, size, segment.log_key)
        if start == end_exclusive:
            return b""
        return self._read(segment, start, end_exclusive)

    def read_range_into(self, metadata: RemoteLogSegmentMetadata, start: int,
                        buffer) -> int:
        """Fills `buffer` with `.log` bytes from `start` (fewer at the segment's end);
        returns how many."""
        view = memoryview(buffer).cast("B")
        segment = self._segment(metadata)
        size = segment.manifest.chunk_index.original_file_size
        end = min(size, start + len(view))
        _check_range(start, end, size, segment.log_key)
        if end == start:
            return 0
        data = self._read(segment, start, end)
        view[:len(data)] = data
        return len(data)

    def map_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                  end_exclusive: int) -> memoryview:
        return memoryview(self.read_range(metadata, start, end_exclusive))

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None):
        """A stream over `.log` bytes [start_position, end_position] (inclusive; None: to
        the end), read a window of chunks at a time."""
        segment = self._segment(metadata)
        size = segment.manifest.chunk_index.original_file_size
        end = size if end_position is None else min(size, end_position + 1)
        _check_range(start_position, max(start_position, end), size, segment.log_key)
        window = max(self._config.chunk_size, 8 * MiB)
        return io.BufferedReader(_RangeStream(self, segment, start_position, end, window),
                                 buffer_size=1 << 16)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType):
        return io.BytesIO(self.fetch_index_bytes(metadata, index_type))

    def fetch_index_bytes(self, metadata: RemoteLogSegmentMetadata,
                          index_type: IndexType) -> bytes:
        """One index, whole (a GCM-verified one when encrypted). A transaction index the
        segment did not have raises RemoteResourceNotFoundError."""
        segment = self._segment(metadata)
        entry = segment.manifest.segment_indexes.get(index_type)
        if entry is None:
            raise RemoteResourceNotFoundError(
                f"{index_type.name.lower()} index of {metadata.remote_log_segment_id} was not "
                f"copied (null in {segment.manifest_key})", file=segment.indexes_key)
        if entry.size == 0:
            return b""
        cache_key = (segment.indexes_key, index_type)
        cached = self._indexes.get(cache_key)
        if cached is not None:
            return cached
        stored = self._store.get_range(segment.indexes_key, entry.position,
                                       entry.position + entry.size)
        name = f"{segment.indexes_key} ({index_type.name.lower()} index)"
        data = segment.transform.decrypt(bytes(stored), name, None)
        expected = entry.size - (GCM_OVERHEAD if segment.transform.data_key else 0)
        if len(data) != expected:
            raise CorruptRemoteObjectError(f"{name}: {len(data)} bytes, {expected} expected",
                                           object_key=segment.indexes_key)
        data = bytes(data)
        self._indexes.put(cache_key, data, len(data))
        return data

    def _read(self, segment: _Segment, start: int, end: int) -> bytes:
        index = segment.manifest.chunk_index
        ids = index.chunk_ids(start, end)
        chunks = [index.chunk(i) for i in ids]
        plain = self._load_chunks(segment, chunks)
        first = chunks[0]
        if len(chunks) == 1:
            return bytes(memoryview(plain[0])[start - first.original_position:
                                              end - first.original_position])
        out = bytearray(end - start)
        pos = 0
        for chunk, data in zip(chunks, plain):
            lo = max(start, chunk.original_position) - chunk.original_position
            hi = min(end, chunk.original_end) - chunk.original_position
            out[pos:pos + hi - lo] = memoryview(data)[lo:hi]
            pos += hi - lo
        return bytes(out)

    def _load_chunks(self, segment: _Segment, chunks: list[Chunk]) -> list[bytes]:
        """The original bytes of `chunks` (consecutive): coalesced ranged GETs of at most
        `fetch.coalesce.max.bytes`, `fetch.parallel.requests` in flight, each chunk
        detransformed and checked."""
        cfg = self._config
        groups: list[list[Chunk]] = [[]]
        size = 0
        for chunk in chunks:
            if groups[-1] and size + chunk.transformed_size > cfg.fetch_coalesce_max_bytes:
                groups.append([])
                size = 0
            groups[-1].append(chunk)
            size += chunk.transformed_size
        store, key = self._store, segment.log_key

        def fetch(group: list[Chunk]):
            lo, hi = group[0].transformed_position, group[-1].transformed_end
            return store.get_range_async(key, lo, hi)

        results: list = [None] * len(groups)
        pending: dict = {}
        next_group = 0
        deadline = time.monotonic() + store.config.call_timeout_ms / 1000.0
        try:
            while next_group < len(groups) or pending:
                while next_group < len(groups) and len(pending) < cfg.fetch_parallel_requests:
                    pending[store.submit(fetch(groups[next_group]))] = next_group
                    next_group += 1
                left = deadline - time.monotonic()
                done, _ = concurrent.futures.wait(
                    pending, timeout=max(0.0, left),
                    return_when=concurrent.futures.FIRST_COMPLETED)
                if not done:
                    raise RemoteStorageError(
                        f"GET of {len(chunks)} chunks did not finish within "
                        f"{store.config.call_timeout_ms} ms", file=store.url(key))
                for fut in done:
                    results[pending.pop(fut)] = fut.result()
        finally:
            for fut in pending:
                fut.cancel()
        plain = []
        for group, data in zip(groups, results):
            view = memoryview(data)
            base = group[0].transformed_position
            for chunk in group:
                part = view[chunk.transformed_position - base:chunk.transformed_end - base]
                plain.append(segment.transform.detransform(part, chunk.original_size, key,
                                                           chunk.id))
        return plain

    # -- lifecycle -----------------------------------------------------------------------

    def close_store(self) -> None:
        if self._store is not None:
            self._store.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.close_store()
            self._manifests.clear()
            self._indexes.clear()

    def __repr__(self):
        if self._store is None:
            return "ObjectStorageRemoteStorageManager(unconfigured)"
        return (f"ObjectStorageRemoteStorageManager({self._store.url(self._keys.prefix)}, "
                f"chunk.size={self._config.chunk_size}, "
                f"compression={self._config.compression}, "
                f"encryption={self._config.encryption})")


class _RangeStream(io.RawIOBase):
    """`.log` bytes [pos, end) read `window` bytes at a time through the RSM."""

    def __init__(self, rsm: ObjectStorageRemoteStorageManager, segment: _Segment, pos: int,
                 end: int, window: int):
        self._rsm, self._segment, self._pos, self._end = rsm, segment, pos, end
        self._window = window
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._buf:
            if self._pos >= self._end:
                return 0
            hi = min(self._end, self._pos + self._window)
            self._buf = memoryview(self._rsm._read(self._segment, self._pos, hi))
            self._pos = hi
        n = min(len(buffer), len(self._buf))
        memoryview(buffer).cast("B")[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


# ---- helpers -----------------------------------------------------------------------------

def _load_key_ring(config: RsmConfig) -> KeyRing:
    files = {key_id: (public, private) for key_id, public, private in config.key_files}
    try:
        return KeyRing.load(config.key_pair_id, files,
                            lambda key_id, kind: f"encryption.key.pairs.{key_id}.{kind}.key.file")
    except ValueError as exc:
        key = getattr(exc, "config_key", None)
        if key is None:
            raise ConfigError("encryption.key.pair.id", config.key_pair_id, str(exc)) from None
        raise ConfigError(key, exc.path, exc.rule) from None


def _file_size(path) -> int:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise _storage_error(exc, f"cannot stat segment {path}") from None
    if size > INT32_MAX:
        raise RemoteStorageError(f"segment {path} is {size} bytes: the format's positions "
                                 "are int32", file=str(path))
    return size


def _read_source(source) -> bytes:
    if source is None:
        return b""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as exc:
        raise _storage_error(exc, f"cannot read {source}") from None


def _transformed_chunks(path, file_size: int, chunk_size: int, transform: ChunkTransform,
                        sizes: list[int]) -> Iterator[bytes]:
    """The `.log`'s chunks, transformed, in order; records each transformed size."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _storage_error(exc, f"cannot open segment {path}") from None
    try:
        pos = 0
        while pos < file_size:
            n = min(chunk_size, file_size - pos)
            data = os.pread(fd, n, pos)
            if len(data) != n:
                raise RemoteStorageError(f"segment {path} ended at byte {pos + len(data)}, "
                                         f"before its size {file_size}", file=str(path))
            stored = transform.transform(data)
            sizes.append(len(stored))
            yield stored
            pos += n
    except OSError as exc:
        raise _storage_error(exc, f"cannot read segment {path}") from None
    finally:
        os.close(fd)


def _check_range(start: int, end: int, size: int, key: str) -> None:
    if not 0 <= start <= end <= size:
        raise RemoteStorageError(f"range [{start}, {end}) is outside the {size} bytes of "
                                 f"{key}", file=key, position=start)


def _storage_error(exc: BaseException, what: str) -> RemoteStorageError:
    if isinstance(exc, OSError) and exc.errno is not None:
        err = RemoteStorageError(f"{what}: [Errno {exc.errno}] {exc.strerror}",
                                 file=getattr(exc, "filename", None))
        err.errno, err.strerror = exc.errno, exc.strerror
        return err
    return RemoteStorageError(f"{what}: {type(exc).__name__}: {exc}")
