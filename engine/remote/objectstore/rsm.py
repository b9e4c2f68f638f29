"""`ObjectStorageRemoteStorageManager`: the object-store tier, in the Aiven plugin's format.

Selected with
`remote.log.storage.manager.class.name=engine.remote.ObjectStorageRemoteStorageManager` or
the plugin's own `io.aiven.kafka.tieredstorage.RemoteStorageManager`; configured with the
plugin's names under `rsm.config.` (read by `config.RsmConfig`: see `RSM_CONFIG_KEYS` and
the store's `STORE_CONFIG_KEYS`), so a broker file written for the plugin loads unchanged. An
unknown key or a bad value fails `configure` with a ConfigError naming the key; secrets (the
store's credentials) never appear in errors, logs or `repr`. The plugin's `key.prefix.mask` and
`metrics.*` keys are accepted and have no effect (object keys are not secrets here; the
metrics have no sampling windows).

Copy (`copy_log_segment_data`, the objects written by `upload`), in the plugin's order:

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

Reads go through the manifest (a loading cache: `fetch.manifest.cache.size` entries for
`fetch.manifest.cache.retention.ms`; checked against its transforms, its data key unwrapped
once). A byte range of the `.log` goes to the `reads.RangeReader`: the chunks holding it come
from the chunk cache (`fetch.chunk.cache.*`; memory or disk, kept across restarts) or from
coalesced ranged GETs with `fetch.max.in.flight.requests` in flight and at most
`fetch.max.request.bytes` each, bounded by `fetch.chunk.cache.get.timeout.ms`; each chunk is
detransformed and checked here (a bad GCM tag, zstd frame or size is a CorruptRemoteObjectError
naming the object and chunk), then cut to the range. Chunk cache entries are named by the
`.log` key plus the segment id and a digest of the manifest, so a re-upload never aliases.
Indexes are cached (`fetch.indexes.cache.size` bytes for `fetch.indexes.cache.retention.ms`);
the first index read of a segment whose `.indexes` is at most 1 MiB fetches them all in one GET
(a remote read wants the offset and transaction indexes), a larger one takes one ranged GET per
index. When the segment's custom metadata names an object prefix or key, reads of `.log` and
`.indexes` use them.

Read-ahead (`fetch.chunk.cache.prefetch.max.size` > 0, with a chunk cache) follows the reads of
a segment a reader said it reads forward (`read_forward`), those served from the chunk cache's
memory (`map_range_if_open`) included: once the read-ahead window reaches past the segment's
end, it follows the chain of next segments the reader named (each `read_forward` one link) as
far as the window reaches; the first whose manifest is not cached is loaded in the background,
the read-ahead continues into its chunks, and its indexes are loaded while those GETs run, so
that the reader crosses boundaries without a GET. Nothing of it blocks a read.

With a chunk cache, `verifies_batch_crcs` holds for a segment once a background pass checked
every batch CRC over its cached chunks, until a chunk of it comes from the store again, and
`read_generation` changes at each such fetch (verdicts.py): readers skip their own CRC pass
over bytes checked before, by that pass or by a read of the same generation.

Metrics (engine.remote.objectstore.metrics) live in the store's registry;
`register_metrics` adds a collector of them to another registry (the RLM's), which follows
the store across a reconfiguration.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import io
import logging
import os
import threading
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import cast

from engine.errors import (
    CorruptRemoteObjectError,
    KafkaEngineError,
    RemoteEncryptionKeyError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from engine.remote.metadata import RemoteLogSegmentId, RemoteLogSegmentMetadata
from engine.remote.objectstore import custom_metadata as cm
from engine.remote.objectstore import segment_source, upload
from engine.remote.objectstore.chunk_cache import LoadingCache
from engine.remote.objectstore.config import RSM_CONFIG_KEYS, RsmConfig, load_key_ring
from engine.remote.objectstore.keys import INDEXES, LOG, MANIFEST, ObjectKeyFactory, main_path
from engine.remote.objectstore.manifest import (
    GCM_OVERHEAD,
    MAX_MANIFEST_BYTES,
    SegmentIndex,
    SegmentManifest,
)
from engine.remote.objectstore.metrics import StoreMetricsCollector
from engine.remote.objectstore.reads import RangeReader, RangeStream, SegmentObject, cut_chunks
from engine.remote.objectstore.store import ObjectStore, StoreConfig
from engine.remote.objectstore.transforms import ChunkTransform, KeyRing, first_batch_compressed
from engine.remote.objectstore.verdicts import BatchCrcVerdicts
from engine.remote.storage import IndexType, LogSegmentData, RemoteStorageManager

__all__ = [
    "RSM_CONFIG_KEYS",
    "ObjectStorageRemoteStorageManager",
    "RsmConfig",
]

log = logging.getLogger(__name__)

MiB = 1024 * 1024

# a segment's `.indexes` up to this size is fetched whole on its first index read
_WHOLE_INDEXES_BYTES = 1 << 20
# chunk transforms run on a small pool, this many chunks ahead of the upload
_TRANSFORM_WORKERS = min(4, os.cpu_count() or 1)
_TRANSFORM_AHEAD = _TRANSFORM_WORKERS + 1
# the indexes a remote read of a segment fetches (engine.remote.index_cache)
_READ_INDEXES = (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION)
# segments a reader said it reads forward, remembered (with their next segment) at most
_FORWARD_KEPT = 4096
_HOT_KEPT = 4096
_HOT_RENEW_S = 1.0


class _IndexSet:
    """Every index of one segment, read with one GET; weighs its bytes in the index cache."""

    __slots__ = ("data", "nbytes")

    def __init__(self, data: dict):
        self.data = data
        self.nbytes = sum(len(v) for v in data.values())

    def __len__(self) -> int:
        return self.nbytes


def _index_bytes(entry: object) -> int:
    """The weight of an index cache entry: the bytes of one index or of an `_IndexSet`."""
    return len(cast("bytes | _IndexSet", entry))


@dataclass(frozen=True)
class _Segment:
    """What reads of one segment need: the manifest, its transforms, an identity of the
    upload (segment id and manifest digest) that names its chunks in the chunk cache, and
    the `.log` as the range reader takes it for the custom metadata it was loaded with
    (built once: every read and cache probe of the segment uses it)."""

    manifest: SegmentManifest
    transform: ChunkTransform
    manifest_key: str
    identity: str
    custom_metadata: bytes | None
    log: SegmentObject


# ---- the manager -------------------------------------------------------------------------

class ObjectStorageRemoteStorageManager(RemoteStorageManager):
    """The object-store tier (see the module docstring). Construct empty, then `configure`;
    or pass a ready `store` and `config` (tests, tools)."""

    def __init__(self, store: ObjectStore | None = None, config: RsmConfig | None = None,
                 key_ring: KeyRing | None = None):
        self._store: ObjectStore | None = None
        self._config: RsmConfig | None = None
        self._closed = False
        self._keys = ObjectKeyFactory("")
        self._hint_lock = threading.Lock()
        # segment id -> [the next segment's metadata or None, its indexes warmed]
        self._forward: collections.OrderedDict[object, list] = collections.OrderedDict()
        self._metric_registries: list = []
        if store is not None:
            self._setup(store, config or RsmConfig(), key_ring)

    def _setup(self, store: ObjectStore, config: RsmConfig, key_ring: KeyRing | None) -> None:
        cache = config.cache
        metrics = store.metrics
        try:  # first: a cache that cannot open leaves this manager unconfigured
            chunk_cache = cache.build(metrics)
        except BaseException:
            store.close()
            raise
        self._store, self._config, self._key_ring = store, config, key_ring
        self._keys = ObjectKeyFactory(config.key_prefix)
        self._manifests = LoadingCache("segment-manifest-cache", cache.manifest_cache_size,
                                       cache.manifest_cache_retention_ms, metrics=metrics)
        self._indexes = LoadingCache("segment-indexes-cache", cache.indexes_cache_size,
                                     cache.indexes_cache_retention_ms, weigher=_index_bytes,
                                     metrics=metrics)
        # segment id -> (its manifest cache entry, when it was renewed): `_cached_segment`
        self._hot: dict[RemoteLogSegmentId, tuple[_Segment, float]] = {}
        self._transform_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=_TRANSFORM_WORKERS, thread_name_prefix="chunk-transform")
        # read-ahead's manifest loads: never waits on this pool or the transform pool
        self._manifest_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=_TRANSFORM_WORKERS, thread_name_prefix="manifest-load")
        self._chunk_cache = chunk_cache
        self._verdicts = None if chunk_cache is None else BatchCrcVerdicts(
            chunk_cache, self._transform_pool)
        self._reader = RangeReader(store, chunk_cache, max_in_flight=config.max_in_flight,
                                   max_request_bytes=config.max_request_bytes,
                                   fetch_max_wait_ms=cache.get_timeout_ms,
                                   prefetch_max_bytes=cache.prefetch_max_size,
                                   on_fetched=(None if self._verdicts is None
                                               else self._verdicts.fetched))
        self._closed = False

    def configure(self, configs: Mapping[str, str]) -> None:
        """Reads the config (see the module docstring), loads and checks every key pair's
        PEM files, and opens the store and caches. ConfigError naming the key for anything
        bad."""
        config = RsmConfig.from_configs(configs)
        store_config = StoreConfig.from_configs(configs)
        key_ring = load_key_ring(config) if config.encryption else None
        self._release()
        self._store = None  # unconfigured (not half-closed) if what follows fails
        self._setup(ObjectStore(store_config), config, key_ring)

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

    @property
    def chunk_cache(self):
        """The chunk cache, or None when `fetch.chunk.cache.class` is not set."""
        self._check_open()
        return self._chunk_cache

    def register_metrics(self, registry) -> None:
        """Adds the store's metrics (object uploads and fetches, requests, errors by kind,
        the caches') to `registry`, through a collector that reads whichever store this
        manager has at collection time. Idempotent per registry."""
        with self._hint_lock:
            if any(r is registry for r in self._metric_registries):
                return
            self._metric_registries.append(registry)
        registry.register(StoreMetricsCollector(self))

    def read_forward(self, metadata: RemoteLogSegmentMetadata,
                     next_segment: RemoteLogSegmentMetadata | None) -> None:
        """Reads of `metadata` are sequential from now on, and read-ahead continues into
        `next_segment` past its end (see the module docstring)."""
        if not self.reads_ahead:
            return
        key = metadata.remote_log_segment_id.id
        with self._hint_lock:
            entry = self._forward.pop(key, None)
            same = entry is not None and (entry[0] is next_segment or (
                entry[0] is not None and next_segment is not None
                and entry[0].remote_log_segment_id == next_segment.remote_log_segment_id))
            self._forward[key] = entry if same else [next_segment, False]
            if len(self._forward) > _FORWARD_KEPT:
                self._forward.popitem(last=False)

    @property
    def zero_copy_ranges(self) -> bool:
        """With a chunk cache, `map_range` of cached chunks is a view of the chunk in memory
        or of the mapped cache entry (one join when a range spans chunks), so a reader may
        redo ranges rather than keep and stitch them."""
        return self._store is not None and self._chunk_cache is not None

    def verifies_batch_crcs(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """With a chunk cache: once the segment's cached chunks were checked whole in this
        process, and none came from the store since (verdicts.py)."""
        upload = self._verdict_key(metadata)
        return upload is not None and self._verdicts.holds(*upload)

    def read_generation(self, metadata: RemoteLogSegmentMetadata) -> Hashable | None:
        """With a chunk cache: the upload's count of chunk fetches (verdicts.py)."""
        upload = self._verdict_key(metadata)
        return None if upload is None else self._verdicts.generation(*upload)

    def _verdict_key(self, metadata: RemoteLogSegmentMetadata) -> tuple[str, str] | None:
        if self._closed or self._store is None or self._verdicts is None:
            return None
        segment = self._cached_segment(metadata)
        return None if segment is None else (self._log_of(metadata, segment).key,
                                             segment.identity)

    @property
    def read_ahead_pending_bytes(self) -> int:
        """Original bytes of read-ahead queued or running."""
        return self._reader.prefetch_pending_bytes if self._store is not None else 0

    @property
    def reads_ahead(self) -> bool:
        """Whether `read_forward` has an effect: read-ahead is configured."""
        return self._store is not None and self._reader.prefetch_max_bytes > 0

    def _read_ahead(self, metadata: RemoteLogSegmentMetadata, seg: SegmentObject,
                    end: int) -> tuple[bool | None, tuple[SegmentObject, ...]]:
        """(sequential, next segments) for the range reader: (None, ()) for a segment no
        reader said it reads forward. The next segments are the links of the `read_forward`
        chain from this one that the read-ahead window from `end` reaches, while their
        manifests are cached; the first one not cached is loaded in the background, and a
        later read continues into it. Never blocks on I/O."""
        chain: list[SegmentObject] = []
        reach = self._reader.prefetch_max_bytes - (seg.size - end)
        md = metadata
        for _ in range(_FORWARD_KEPT):  # a chain of at most the links kept
            with self._hint_lock:
                entry = self._forward.get(md.remote_log_segment_id.id)
                if entry is None:
                    return (None if md is metadata else True), tuple(chain)
                next_md, warming = entry
                if next_md is None or reach <= 0:
                    return True, tuple(chain)
                entry[1] = True
            segment = self._cached_segment(next_md)
            if segment is None:
                break
            chain.append(self._log_of(next_md, segment))
            reach -= chain[-1].size
            md = next_md
        else:
            return True, tuple(chain)
        if not warming:
            with contextlib.suppress(RuntimeError):  # closing: no read-ahead any more
                self._transform_pool.submit(self._warm, next_md, seg, end, tuple(chain)
                                            ).add_done_callback(_log_unexpected)
        return True, tuple(chain)

    def _warm(self, metadata: RemoteLogSegmentMetadata, previous: SegmentObject,
              end: int, between: tuple[SegmentObject, ...]) -> None:
        """Loads the manifests of the segment and of the next links of the `read_forward`
        chain that the read-ahead window reaches (ahead of a reader crossing into them from
        `previous`, whose read ended at `end`, through `between`), all at once: one asked
        for behind the chunk GETs waits for the server to stream them. Each segment's
        read-ahead is queued as soon as its manifest and those before it are in (their
        GETs need only the manifests), so it does not wait for a later read. Then loads the
        indexes a remote read wants (offset, time, transaction) of each, while the chunk
        GETs run."""
        reach = self._reader.prefetch_max_bytes - (previous.size - end) - sum(
            seg.size for seg in between)
        links: list[RemoteLogSegmentMetadata] = [metadata]
        while (reach := reach - links[-1].segment_size_in_bytes) > 0:
            nxt = self._link_to_warm(links[-1])
            if nxt is None:
                break
            links.append(nxt)
        loads = [self._manifest_pool.submit(self._segment, md) for md in links]
        loaded: list[SegmentObject] = []
        try:
            for md, load in zip(links, loads):
                loaded.append(self._log_of(md, load.result()))
                self._reader.read_ahead_from(previous, end, (*between, *loaded))
            for md in links:
                self._warm_indexes(md)
        except (KafkaEngineError, OSError, RuntimeError, concurrent.futures.CancelledError) as e:
            # read-ahead is an optimisation (a RuntimeError: closing): the reader loads them
            # itself when it gets there
            log.debug("read-ahead from %s: %d of %d manifests loaded, then: %r",
                      metadata.remote_log_segment_id, len(loaded), len(links), e)
            unloaded = {md.remote_log_segment_id for md in links[len(loaded):]}
            with self._hint_lock:
                for entry in self._forward.values():
                    if entry[0] is not None and entry[0].remote_log_segment_id in unloaded:
                        entry[1] = False  # a later read may try again

    def _link_to_warm(self, metadata: RemoteLogSegmentMetadata
                      ) -> RemoteLogSegmentMetadata | None:
        """The segment a reader named after `metadata`, when no read-ahead loads it yet
        (then marked as loading)."""
        with self._hint_lock:
            entry = self._forward.get(metadata.remote_log_segment_id.id)
            if entry is None or entry[0] is None or entry[1]:
                return None
            entry[1] = True
            return entry[0]

    def _warm_indexes(self, metadata: RemoteLogSegmentMetadata) -> None:
        for index_type in _READ_INDEXES:
            if index_type is IndexType.TRANSACTION and metadata.txn_idx_empty:
                continue
            try:
                self.fetch_index_bytes(metadata, index_type)
            except RemoteResourceNotFoundError:
                continue  # a transaction index the segment does not have

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError("ObjectStorageRemoteStorageManager is closed")
        if self._store is None:
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
            file_size = segment_source.file_size(segment_data.log_segment)
            compress = file_size > 0 and cfg.compression and (
                not cfg.compression_heuristic
                or first_batch_compressed(segment_data.log_segment) is False)
            data_key = self._key_ring.new_data_key() if cfg.encryption else None
            transform = ChunkTransform(compress, data_key)
            chunk_index, log_bytes = upload.upload_log(
                self._store, keys[LOG], segment_data.log_segment, file_size, cfg.chunk_size,
                transform, self._transform_pool, _TRANSFORM_AHEAD)
            indexes, index_bytes = upload.upload_indexes(self._store, keys[INDEXES],
                                                         segment_data, transform)
            manifest = SegmentManifest(chunk_index, indexes, compress,
                                       None if data_key is None else data_key.metadata)
            manifest_bytes = self._store.upload(keys[MANIFEST], manifest.to_json(metadata),
                                                object_type="rsm-manifest")
        except BaseException as exc:
            self._delete_keys(list(keys.values()), quiet=True)
            if isinstance(exc, KafkaEngineError) or not isinstance(exc, Exception):
                raise
            raise segment_source.storage_error(
                exc, f"copy of {metadata.remote_log_segment_id} to "
                     f"{self._store.url(keys[LOG])}") from exc
        return self._custom_metadata(metadata, log_bytes + index_bytes + manifest_bytes)

    def _custom_metadata(self, metadata, total: int) -> bytes | None:
        fields = self._config.custom_metadata_fields
        if not fields:
            return None
        values: dict[int, int | str] = {cm.REMOTE_SIZE: total,
                                        cm.OBJECT_PREFIX: self._keys.prefix,
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
        self._hot.pop(metadata.remote_log_segment_id, None)
        self._manifests.invalidate(self._keys.key(metadata, MANIFEST))
        for key in {self._keys.key(metadata, INDEXES), self._read_key(metadata, INDEXES,
                                                                      strict=False)}:
            for index_type in (*IndexType, None):
                self._indexes.invalidate((key, index_type))

    # -- reads ---------------------------------------------------------------------------

    def _segment(self, metadata: RemoteLogSegmentMetadata) -> _Segment:
        """The segment's manifest and transforms, from the cache or the bucket."""
        self._check_open()
        segment = self._cached_segment(metadata)
        if segment is not None:
            return segment
        manifest_key = self._keys.key(metadata, MANIFEST)
        return self._manifests.get(manifest_key, lambda: self._load_segment(metadata,
                                                                           manifest_key))

    def _cached_segment(self, metadata: RemoteLogSegmentMetadata) -> _Segment | None:
        """The segment's manifest when the manifest cache holds it, else None; never I/O.
        Every read asks several times, so a segment asked for within the last second is
        found by its id alone, and its manifest cache entry is renewed (last access, LRU
        place) at most once a second."""
        sid = metadata.remote_log_segment_id
        now = time.monotonic()
        hot = self._hot.get(sid)
        if hot is not None and now - hot[1] < _HOT_RENEW_S:
            return hot[0]
        segment = self._manifests.peek(self._keys.key(metadata, MANIFEST))
        if segment is None:
            self._hot.pop(sid, None)
            return None
        if len(self._hot) >= _HOT_KEPT:
            self._hot.clear()
        self._hot[sid] = (segment, now)
        return segment

    def _load_segment(self, metadata: RemoteLogSegmentMetadata, manifest_key: str) -> _Segment:
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
                    key_id=manifest.encryption.key_id, object_key=manifest_key,
                    unknown_key=True)
            data_key = self._key_ring.unwrap(manifest.encryption, manifest_key)
        digest = hashlib.blake2b(data, digest_size=12).hexdigest()
        identity = f"{metadata.remote_log_segment_id.id}-{digest}"
        transform = ChunkTransform(manifest.compression, data_key)
        log_object = self._new_log_object(self._read_key(metadata, LOG), manifest, transform,
                                          identity)
        return _Segment(manifest, transform, manifest_key, identity, metadata.custom_metadata,
                        log_object)

    def _read_key(self, metadata: RemoteLogSegmentMetadata, suffix: str, *,
                  strict: bool = True) -> str:
        if metadata.custom_metadata is None:
            return self._keys.key(metadata, suffix)
        try:
            fields = cm.decoded_fields(metadata.custom_metadata)
        except ValueError as exc:
            if not strict:
                return self._keys.key(metadata, suffix)
            raise CorruptRemoteObjectError(
                f"custom metadata of {metadata.remote_log_segment_id} is not the object-store "
                f"tier's: {exc}", object_key=self._keys.key(metadata, MANIFEST)) from None
        # the decoder gives the string fields (the object prefix and key) as str
        prefix, key = fields.get(cm.OBJECT_PREFIX), fields.get(cm.OBJECT_KEY)
        return self._keys.key_for_read(metadata, suffix,
                                       prefix if isinstance(prefix, str) else None,
                                       key if isinstance(key, str) else None)

    def _log_object(self, metadata: RemoteLogSegmentMetadata) -> SegmentObject:
        """The segment's `.log` as the range reader takes it."""
        return self._log_of(metadata, self._segment(metadata))

    def _log_of(self, metadata: RemoteLogSegmentMetadata, segment: _Segment) -> SegmentObject:
        """The segment's `.log` for the reads of `metadata`: the one built at load, unless
        this metadata's custom metadata names other objects."""
        if metadata.custom_metadata == segment.custom_metadata:
            return segment.log
        return self._new_log_object(self._read_key(metadata, LOG), segment.manifest,
                                    segment.transform, segment.identity)

    @staticmethod
    def _new_log_object(key: str, manifest: SegmentManifest, transform: ChunkTransform,
                        identity: str) -> SegmentObject:
        index = manifest.chunk_index
        detransform = None
        if not transform.identity:
            def detransform(i, raw):
                return transform.detransform(raw, index.original_size(i), key, i)
        return SegmentObject(key, index, identity, detransform)

    def segment_size(self, metadata: RemoteLogSegmentMetadata) -> int:
        """Original bytes of the segment's `.log`, from its manifest."""
        return self._segment(metadata).manifest.chunk_index.original_file_size

    def read_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                   end_exclusive: int) -> bytes | memoryview:
        """`.log` bytes [start, end_exclusive): ValueError for a range outside the segment,
        CorruptRemoteObjectError when its manifest holds fewer bytes than its metadata."""
        seg = self._log_object(metadata)
        _check_range(metadata, seg, start, end_exclusive)
        sequential, next_segs = self._read_ahead(metadata, seg, end_exclusive)
        data = self._reader.read(seg, start, end_exclusive, sequential=sequential,
                                 next_segments=next_segs)
        if self._verdicts is not None:
            self._verdicts.check_after(seg.key, seg.identity, seg.index, end_exclusive,
                                       metadata.remote_log_segment_id.id)
        return memoryview(data) if isinstance(data, bytearray) else data

    def read_range_once(self, metadata: RemoteLogSegmentMetadata, start: int,
                        end_exclusive: int) -> bytes | memoryview:
        """`.log` bytes [start, end_exclusive) read once: an exact ranged GET in plain mode,
        the covering chunks only with transforms; no read-ahead (`RangeReader.read_once`)."""
        seg = self._log_object(metadata)
        _check_range(metadata, seg, start, end_exclusive)
        return self._reader.read_once(seg, start, end_exclusive)

    def read_range_into(self, metadata: RemoteLogSegmentMetadata, start: int,
                        buffer) -> int:
        """Fills `buffer` with `.log` bytes from `start` (the range must lie inside the
        segment); returns len(buffer)."""
        seg = self._log_object(metadata)
        end = start + memoryview(buffer).nbytes
        _check_range(metadata, seg, start, end)
        sequential, next_segs = self._read_ahead(metadata, seg, end)
        n = self._reader.read_into(seg, start, buffer, sequential=sequential,
                                   next_segments=next_segs)
        if self._verdicts is not None:
            self._verdicts.check_after(seg.key, seg.identity, seg.index, end,
                                       metadata.remote_log_segment_id.id)
        return n

    def map_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                  end_exclusive: int) -> memoryview:
        """A read-only view of `.log` bytes [start, end_exclusive): `map_range_if_open`
        when the bytes are at hand (no copy for a range in one chunk, and about half the
        bookkeeping of a read), else a view of `read_range`."""
        view = self.map_range_if_open(metadata, start, end_exclusive)
        if view is None:
            view = memoryview(self.read_range(metadata, start, end_exclusive)).toreadonly()
        return view

    def map_prefix(self, metadata: RemoteLogSegmentMetadata, start: int,
                   end_exclusive: int) -> memoryview:
        """Up to the end of `start`'s chunk: a view of one chunk is the cache's own memory,
        a view across chunks a join."""
        view = self.map_range_if_open(metadata, start, end_exclusive, prefix=True)
        if view is None:
            if self._store is not None and self._chunk_cache is not None:
                index = self._segment(metadata).manifest.chunk_index
                chunks = index.chunk_ids(start, end_exclusive)
                if chunks:
                    end_exclusive = min(end_exclusive, index.original_range(chunks[0])[1])
            view = memoryview(self.read_range(metadata, start, end_exclusive)).toreadonly()
        return view

    def map_range_if_open(self, metadata: RemoteLogSegmentMetadata, start: int,
                          end_exclusive: int, *, prefix: bool = False) -> memoryview | None:
        """`.log` bytes [start, end_exclusive) when they need no storage I/O: the manifest
        cached and every chunk of the range in the chunk cache's memory or a checked, mapped
        disk entry (a range in one chunk: no copy); else None, and the caller reads through
        `read_range` on a thread that may block. Read-ahead follows a range served here as
        it follows `read_range`. `prefix`: only up to the end of `start`'s chunk
        (`map_prefix`)."""
        if self._closed or self._store is None or self._chunk_cache is None:
            return None
        segment = self._cached_segment(metadata)
        if segment is None:
            return None
        index = segment.manifest.chunk_index
        if not 0 <= start <= end_exclusive <= min(index.original_file_size,
                                                  metadata.segment_size_in_bytes):
            return None
        chunks = index.chunk_ids(start, end_exclusive)
        if prefix and len(chunks) > 1:
            chunks = chunks[:1]
            end_exclusive = index.original_range(chunks[0])[1]
        seg = self._log_of(metadata, segment)
        parts = []
        for i in chunks:
            data = self._chunk_cache.get_if_open(seg.chunk_key(i))
            if data is None:
                return None
            parts.append((i, data))
        if not parts:
            return memoryview(b"")
        self._verdicts.check_after(seg.key, seg.identity, index, end_exclusive,
                                   metadata.remote_log_segment_id.id)
        self._store.metrics.requested(end_exclusive - start)  # as `read_range` counts it
        if self._reader.prefetch_max_bytes > 0:
            sequential, next_segs = self._read_ahead(metadata, seg, end_exclusive)
            self._reader.note_read(seg, start, end_exclusive, sequential=sequential,
                                   next_segments=next_segs)
        return memoryview(cut_chunks(index, parts, start, end_exclusive)).toreadonly()

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None):
        """A stream over `.log` bytes [start_position, end_position] (inclusive; None: to
        the end), read a window of chunks at a time."""
        seg = self._log_object(metadata)
        size = metadata.segment_size_in_bytes
        end = size if end_position is None else min(size, end_position + 1)
        _check_range(metadata, seg, start_position, max(start_position, end))
        window = max(self._config.chunk_size, 8 * MiB)
        return io.BufferedReader(RangeStream(self._reader, seg, start_position, end, window),
                                 buffer_size=1 << 16)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType):
        return io.BytesIO(self.fetch_index_bytes(metadata, index_type))

    def fetch_index_bytes(self, metadata: RemoteLogSegmentMetadata,
                          index_type: IndexType) -> bytes:
        """One index, whole (GCM-verified when encrypted). A transaction index the segment
        did not have raises RemoteResourceNotFoundError."""
        segment = self._segment(metadata)
        key = self._read_key(metadata, INDEXES)
        entry = segment.manifest.segment_indexes.get(index_type)
        if entry is None:
            raise RemoteResourceNotFoundError(
                f"{index_type.name.lower()} index of {metadata.remote_log_segment_id} was not "
                f"copied (null in {segment.manifest_key})", file=key)
        if entry.size == 0:
            return b""
        if segment.manifest.segment_indexes.total_size <= _WHOLE_INDEXES_BYTES:
            # small: one GET brings every index of the segment (a remote read wants the
            # offset and transaction indexes, a time lookup the time index)
            indexes = self._indexes.get((key, None),
                                        lambda: self._load_all_indexes(segment, key))
            return indexes.data[index_type]
        return self._indexes.get((key, index_type),
                                 lambda: self._load_index(segment, key, entry, index_type,
                                                          None))

    def _load_index(self, segment: _Segment, key: str, entry: SegmentIndex,
                    index_type: IndexType, whole) -> bytes:
        if whole is None:
            stored = self._store.get_range(key, entry.position, entry.position + entry.size)
        else:
            stored = memoryview(whole)[entry.position:entry.position + entry.size]
        name = f"{key} ({index_type.name.lower()} index)"
        data = segment.transform.decrypt(stored, name, None)
        expected = entry.size - (GCM_OVERHEAD if segment.transform.data_key else 0)
        if len(data) != expected:
            raise CorruptRemoteObjectError(f"{name}: {len(data)} bytes, {expected} expected",
                                           object_key=key)
        return bytes(data)

    def _load_all_indexes(self, segment: _Segment, key: str) -> _IndexSet:
        indexes = segment.manifest.segment_indexes
        whole = self._store.get_range(key, 0, indexes.total_size)
        data = {}
        for index_type in IndexType:
            entry = indexes.get(index_type)
            if entry is not None:
                data[index_type] = (self._load_index(segment, key, entry, index_type, whole)
                                    if entry.size else b"")
        return _IndexSet(data)

    # -- lifecycle -----------------------------------------------------------------------

    def _release(self) -> None:
        if self._store is None:
            return
        self._store.close()  # first: reads still running end now, the pools wait for none
        self._reader.close()
        self._transform_pool.shutdown(wait=True, cancel_futures=True)
        self._manifest_pool.shutdown(wait=True, cancel_futures=True)
        if self._chunk_cache is not None:
            self._chunk_cache.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    def __repr__(self):
        if self._store is None:
            return "ObjectStorageRemoteStorageManager(unconfigured)"
        return (f"ObjectStorageRemoteStorageManager({self._store.url(self._keys.prefix)}, "
                f"chunk.size={self._config.chunk_size}, "
                f"compression={self._config.compression}, "
                f"encryption={self._config.encryption})")


# ---- helpers -----------------------------------------------------------------------------

def _log_unexpected(future: concurrent.futures.Future) -> None:
    """A background task's failure that it did not expect: logged, never lost."""
    if not future.cancelled() and future.exception() is not None:
        log.error("read-ahead task failed", exc_info=future.exception())


def _check_range(metadata: RemoteLogSegmentMetadata, seg: SegmentObject, start: int,
                 end: int) -> None:
    size = metadata.segment_size_in_bytes
    if not 0 <= start <= end <= size:
        raise ValueError(f"byte range [{start}, {end}) outside remote segment "
                         f"{metadata.remote_log_segment_id} of {size} bytes")
    if end > seg.size:
        raise CorruptRemoteObjectError(
            f"{seg.key}: its manifest holds {seg.size} bytes, the metadata of "
            f"{metadata.remote_log_segment_id} {size}", object_key=seg.key)
