"""The chunk cache of the object-store tier (detransformed chunk bytes, in memory and on many
disks), and small loading caches for manifests and segment indexes.

**Keys.** A chunk is named by `ChunkKey(object_key, identity, index)`: the `.log` object's
key, an identity of what was uploaded under it (the format side passes something that
changes whenever the bytes could: the segment id and a digest of the manifest), and the
chunk's index. A segment re-uploaded under another segment id has another object key; a
retried upload of the same segment id with other transforms has another manifest, so no
two uploads alias in the cache.

**Memory, then disk.** Lookups try an LRU of bytes in memory (`memory_bytes`), then the disk
tier: files spread over every directory of `fetch.chunk.cache.path` (by a hash of the key,
so many disks share the load), bounded in total by `fetch.chunk.cache.size` bytes (-1 =
unbounded), least recently used evicted first. A disk hit is promoted into memory.

**Entries on disk** are written atomically: to `<dir>/tmp/...`, then renamed to
`<dir>/<hh>/<digest>.chunk`. Each file holds a header, the full key and the bytes:

    magic  b"KTCC" | version u8 (1) | key length u16 | data length u64 | crc32c u32
    key (UTF-8) | data

(big-endian; the CRC-32C covers key and data). Disk writes happen on a writer thread after
the chunk is in memory, so a cold read never waits for a disk; if more than
`write_queue_bytes` are waiting, new entries stay memory-only. An entry is fsynced before
its rename (on the writer thread): an entry this process wrote counts as checked, and a
write-back failing later would otherwise go unseen. A chunk fetched again (a read that
missed while the earlier fetch's write was queued) supersedes the earlier bytes: the
entry on disk is dropped, and a queued write of them never lands, so the disk never
serves bytes of a fetch that a later one replaced.

**Kept across restarts** (the plugin wipes its cache at start): opening the cache lists the
directories (names and sizes, not contents), deletes leftover temporary files, and serves
the entries again. An entry is checked whole (header, key, length, CRC) before its bytes
are first used; a damaged or mismatched entry is deleted and counted as a miss (the caller
refetches it), never served. Disk hits of entries of 1 MiB or more are read-only views of a
mapping of the entry file, not copies. The CRC verdict is kept per entry while the file's
identity (inode, size, mtime) stays the same, as the filesystem tier keeps its verdict per
segment file: an entry is never rewritten in place (a new one replaces it by rename), so a
later read of an entry already checked costs a mapping, not a pass over its bytes. An entry
this process wrote is checked by construction. The mappings of the last entries checked
are kept open (`_OPEN_MAPPINGS`): a hit on one needs no file system call at all, so
`get_if_open` serves it to readers that must not block, as the filesystem tier serves its
open, checked segment mappings.

**Never a failed or partial fetch.** Only `put` fills the cache, and the reader calls it
with a complete, detransformed chunk; failures are never stored (`LoadingCache` likewise
caches only values its loader returned).

Metrics: `cache_hits`, `cache_misses`, `cache_eviction`, `cache_eviction_weight`,
`cache_load_success`, `cache_load_failure`, `cache_size_bytes` with `cache=chunk-cache` (and
the loading caches' names), see metrics.py.

Thread-safety: every method may be called from any number of threads.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import mmap
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.checksums import crc32c
from engine.config import ConfigError
from engine.errors import KafkaStorageError
from engine.remote.objectstore.config_values import ConfigValues
from engine.remote.objectstore.metrics import ObjectStoreMetrics

__all__ = [
    "CACHE_CLASS_ALIASES",
    "CHUNK_CACHE_CONFIG_KEYS",
    "ChunkCache",
    "ChunkCacheConfig",
    "ChunkKey",
    "LoadingCache",
]

MiB = 1024 * 1024
_MAGIC = b"KTCC"
_VERSION = 1
_HEADER = struct.Struct(">4sBHQI")
# entries at least this large are mapped rather than read: a mapping holds a file
# descriptor while any view of it lives, so small entries (many per MiB of memory tier)
# are read into memory instead
_MAP_MIN_BYTES = 1 << 20
# mapped entries kept open after their check (each holds a file descriptor), so a later hit
# costs a dict lookup rather than an open, a map and a key comparison
_OPEN_MAPPINGS = 64
_SUFFIX = ".chunk"
# stripes of the locks that order a put and a disk write of one entry
_ENTRY_LOCK_STRIPES = 64

CACHE_CLASS_ALIASES = {
    "io.aiven.kafka.tieredstorage.fetch.cache.MemoryChunkCache": "memory",
    "io.aiven.kafka.tieredstorage.fetch.cache.DiskChunkCache": "disk",
    "memory": "memory",
    "disk": "disk",
}

CHUNK_CACHE_CONFIG_KEYS = frozenset({
    "fetch.chunk.cache.class", "fetch.chunk.cache.size", "fetch.chunk.cache.path",
    "fetch.chunk.cache.retention.ms", "fetch.chunk.cache.prefetch.max.size",
    "fetch.chunk.cache.get.timeout.ms", "fetch.chunk.cache.thread.pool.size",
    "fetch.chunk.cache.memory.size",
    "fetch.manifest.cache.size", "fetch.manifest.cache.retention.ms",
    "fetch.indexes.cache.size", "fetch.indexes.cache.retention.ms",
})
"""Every key `ChunkCacheConfig.from_configs` reads (names under `rsm.config.`)."""


@dataclass(frozen=True)
class ChunkCacheConfig:
    """The plugin's cache settings. `kind` "memory" (MemoryChunkCache: `size` bounds memory)
    or "disk" (DiskChunkCache: `size` bounds the disk tier over `paths`, and `memory_size`,
    an engine addition, the memory tier in front of it). `size` -1 = unbounded; None = no
    chunk cache configured."""

    kind: str | None = None
    size: int = -1
    paths: tuple[str, ...] = ()
    memory_size: int = 64 * MiB
    retention_ms: int = 600_000
    prefetch_max_size: int = 0
    get_timeout_ms: int = 10_000
    thread_pool_size: int = 0
    manifest_cache_size: int = 1000
    manifest_cache_retention_ms: int = 3_600_000
    indexes_cache_size: int = 10 * MiB
    indexes_cache_retention_ms: int = 600_000

    @classmethod
    def from_configs(cls, configs: Mapping[str, str]) -> ChunkCacheConfig:
        """Parse the cache keys (without `rsm.config.`); ConfigError names a bad key."""
        values = ConfigValues(configs)

        def integer(key, default, lo, hi=2**62):
            return values.integer(key, default, lo, hi)

        get = values.get
        raw_class = get("fetch.chunk.cache.class")
        kind = None
        if raw_class is not None:
            kind = CACHE_CLASS_ALIASES.get(raw_class)
            if kind is None:
                raise ConfigError("fetch.chunk.cache.class", raw_class,
                                  f"one of {', '.join(sorted(CACHE_CLASS_ALIASES))}")
        size = values.optional_integer("fetch.chunk.cache.size", -1, 2**62)
        if kind is not None and size is None:
            raise ConfigError("fetch.chunk.cache.size", None,
                              "required when fetch.chunk.cache.class is set")
        if size == 0:
            raise ConfigError("fetch.chunk.cache.size", 0, "-1 (unbounded) or positive")
        paths_raw = get("fetch.chunk.cache.path")
        paths = tuple(p.strip() for p in paths_raw.split(",") if p.strip()) if paths_raw \
            else ()
        if kind == "disk" and not paths:
            raise ConfigError("fetch.chunk.cache.path", paths_raw,
                              "DiskChunkCache needs at least one directory")
        return cls(
            kind=kind, size=-1 if size is None else size, paths=paths if kind == "disk" else (),
            memory_size=integer("fetch.chunk.cache.memory.size", 64 * MiB, 0),
            retention_ms=integer("fetch.chunk.cache.retention.ms", 600_000, -1),
            prefetch_max_size=integer("fetch.chunk.cache.prefetch.max.size", 0, 0, 2**31 - 1),
            get_timeout_ms=integer("fetch.chunk.cache.get.timeout.ms", 10_000, 1),
            thread_pool_size=integer("fetch.chunk.cache.thread.pool.size", 0, 0, 1024),
            manifest_cache_size=integer("fetch.manifest.cache.size", 1000, -1),
            manifest_cache_retention_ms=integer("fetch.manifest.cache.retention.ms",
                                                3_600_000, -1),
            indexes_cache_size=integer("fetch.indexes.cache.size", 10 * MiB, -1),
            indexes_cache_retention_ms=integer("fetch.indexes.cache.retention.ms", 600_000,
                                               -1),
        )

    def build(self, metrics: ObjectStoreMetrics | None = None) -> ChunkCache | None:
        """The chunk cache these settings describe (None when no class is configured).
        ConfigError naming `fetch.chunk.cache.path` and the directory when one cannot be
        created or used."""
        if self.kind is None:
            return None
        if self.kind == "memory":
            return ChunkCache(memory_bytes=self.size, retention_ms=self.retention_ms,
                              metrics=metrics)
        try:
            return ChunkCache(memory_bytes=self.memory_size, disk_paths=self.paths,
                              disk_bytes=self.size, retention_ms=self.retention_ms,
                              metrics=metrics)
        except KafkaStorageError as exc:
            raise ConfigError("fetch.chunk.cache.path", ",".join(self.paths),
                              str(exc)) from exc


@dataclass(frozen=True)
class ChunkKey:
    """One chunk of one upload: the `.log` object key, the upload's identity (see the module
    docstring) and the chunk index."""

    object_key: str
    identity: str
    index: int

    def text(self) -> str:
        return f"{self.object_key}\n{self.identity}\n{self.index}"

    def digest(self) -> str:
        return _digest(self.object_key, self.identity, self.index)


@functools.lru_cache(maxsize=8192)  # every lookup names its entry: a hash per call otherwise
def _digest(object_key: str, identity: str, index: int) -> str:
    text = f"{object_key}\n{identity}\n{index}"
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def _check_cache_dir(d: Path) -> None:
    """Creates the cache directory `d` (and its `tmp`) and writes a file there, so that a
    directory that cannot hold entries fails at start, not on every write later.
    KafkaStorageError naming the directory and why."""
    probe = d / "tmp" / f"probe-{os.getpid()}-{threading.get_ident()}"
    try:
        (d / "tmp").mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.unlink(probe)
    except OSError as e:
        where = "" if e.filename is None or Path(e.filename) == d else f" ({e.filename})"
        raise KafkaStorageError(
            f"chunk cache directory {d} cannot be created or used{where}: "
            f"[errno {e.errno}] {e.strerror}", log_dir=d) from e


class ChunkCache:
    """Chunk bytes in memory (LRU, `memory_bytes`; -1 = unbounded) and, with `disk_paths`,
    on disk (LRU over all the directories together, `disk_bytes`; -1 = unbounded).
    `retention_ms` (-1 = forever) expires entries not read for that long."""

    CACHE = "chunk-cache"

    def __init__(self, *, memory_bytes: int = 64 * MiB, disk_paths: Sequence[str] = (),
                 disk_bytes: int = -1, retention_ms: int = -1,
                 metrics: ObjectStoreMetrics | None = None,
                 write_queue_bytes: int = 256 * MiB, clock=time.monotonic):
        self.metrics = metrics if metrics is not None else ObjectStoreMetrics()
        self._memory_cap = memory_bytes
        self._disk_cap = disk_bytes
        self._retention_s = None if retention_ms < 0 else retention_ms / 1000.0
        self._clock = clock
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)
        self._mem: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._mem_bytes = 0
        # disk index: digest -> (path, file size, last access); LRU order
        self._disk: OrderedDict[str, tuple[Path, int, float]] = OrderedDict()
        self._disk_bytes = 0
        # digest -> (inode, size, mtime_ns) of the entry file whose whole content checked out
        self._verified: dict[str, tuple[int, int, int]] = {}
        # digest -> a read-only view of the data of a checked, mapped entry; LRU order
        self._open: OrderedDict[str, memoryview] = OrderedDict()
        self._dirs = [Path(p) for p in disk_paths]
        self._writing_bytes = 0
        self._write_queue_cap = write_queue_bytes
        # digest -> the latest `put` of it while writes of it are queued, and how many are:
        # a write lands only if no later `put` superseded its bytes
        self._latest_put: dict[str, object] = {}
        self._queued_writes: dict[str, int] = {}
        # a `put` and a write's rename of one entry exclude each other (lock striped by
        # digest, taken before `_lock`), so the rename runs outside `_lock`, which lookups
        # take
        self._entry_locks = [threading.Lock() for _ in range(_ENTRY_LOCK_STRIPES)]
        self._writer = None
        if self._dirs:
            for d in self._dirs:
                _check_cache_dir(d)
            self._reopen()
            self._writer = concurrent.futures.ThreadPoolExecutor(
                max_workers=min(len(self._dirs), 4), thread_name_prefix="chunk-cache-writer")
        self._report_size()

    # -- lookups -------------------------------------------------------------------------
    def get(self, key: ChunkKey, *, background: bool = False) -> bytes | memoryview | None:
        """The chunk's bytes, or None (counted as a miss) when absent, expired or damaged.
        `background`: a lookup of the engine's own (a check of cached bytes), neither
        counted nor promoted into memory, so it displaces no reader's chunks."""
        digest = key.digest()
        now = self._clock()
        with self._lock:
            data = self._memory_hit_locked(digest, now)
            if data is None:
                data = self._open_hit_locked(digest, now)
            if data is not None:
                if not background:
                    self.metrics.cache_event(self.CACHE, "cache_hits")
                return data
            on_disk = self._disk.get(digest)
            if on_disk is not None and self._expired(on_disk[2], now):
                self._drop_disk_locked(digest, evicted=True)
                on_disk = None
        data = None
        if on_disk is not None:
            data = self._read_entry(on_disk[0], key)
            with self._lock:
                if data is None:
                    if self._disk.get(digest) is not None and self._disk[digest][0] == on_disk[0]:
                        self._drop_disk_locked(digest, evicted=False)
                elif digest in self._disk:
                    path, size, _ = self._disk[digest]
                    self._disk[digest] = (path, size, now)
                    self._disk.move_to_end(digest)
        if background:
            return data
        if data is None:
            self.metrics.cache_event(self.CACHE, "cache_misses")
            return None
        self.metrics.cache_event(self.CACHE, "cache_hits")
        self._put_memory(digest, data, now)
        return data

    def put(self, key: ChunkKey, data) -> None:
        """Cache a complete, detransformed chunk (memory now, disk soon). `data` is any
        read-only bytes-like object and is kept as given (no copy): the caller must not
        change it afterwards (fetched buffers and decoded chunks are never reused)."""
        if not isinstance(data, (bytes, memoryview)) or _holds_more(data):
            data = bytes(data)  # a slice of a larger buffer would keep all of it alive
        digest = key.digest()
        now = self._clock()
        self._put_memory(digest, data, now)
        self.metrics.cache_event(self.CACHE, "cache_load_success")
        if self._writer is None:
            return
        put = object()
        with self._entry_lock(digest), self._lock:
            # the chunk was fetched again (a read missed while an earlier fetch's write was
            # queued, or after it landed): the earlier bytes, maybe not these, never serve
            if digest in self._disk:
                self._drop_disk_locked(digest, evicted=False)
            if self._queued_writes.get(digest):
                self._latest_put[digest] = put
            if self._writing_bytes + len(data) > self._write_queue_cap:
                return
            self._writing_bytes += len(data)
            self._latest_put[digest] = put
            self._queued_writes[digest] = self._queued_writes.get(digest, 0) + 1
        try:
            self._writer.submit(self._write_entry, digest, key, data, put)
        except RuntimeError:  # closed
            self._write_done(digest, len(data))

    def get_in_memory(self, key: ChunkKey) -> bytes | memoryview | None:
        """The chunk's bytes if the memory tier holds them, else None, never touching a disk
        (for reads that must not block on I/O). A hit counts as one; a miss is not counted
        (the caller goes on to `get`, which counts it)."""
        with self._lock:
            data = self._memory_hit_locked(key.digest(), self._clock())
        if data is not None:
            self.metrics.cache_event(self.CACHE, "cache_hits")
        return data

    def get_if_open(self, key: ChunkKey) -> bytes | memoryview | None:
        """The chunk's bytes if the memory tier holds them or its disk entry is checked and
        mapped already, else None: no open, map or check of a file (page faults on a kept
        mapping remain, page-cache reads as for the filesystem tier). Counted as
        `get_in_memory`."""
        digest = key.digest()
        now = self._clock()
        with self._lock:
            data = self._memory_hit_locked(digest, now)
            if data is None:
                data = self._open_hit_locked(digest, now)
        if data is not None:
            self.metrics.cache_event(self.CACHE, "cache_hits")
        return data

    def _open_hit_locked(self, digest: str, now: float):
        data = self._open.get(digest)
        if data is None:
            return None
        on_disk = self._disk.get(digest)
        if on_disk is None or self._expired(on_disk[2], now):
            return None  # `get` expires it
        self._open.move_to_end(digest)
        self._disk[digest] = (on_disk[0], on_disk[1], now)
        self._disk.move_to_end(digest)
        return data

    def _memory_hit_locked(self, digest: str, now: float):
        hit = self._mem.get(digest)
        if hit is None:
            return None
        if self._expired(hit[1], now):
            del self._mem[digest]
            self._mem_bytes -= len(hit[0])
            return None
        self._mem[digest] = (hit[0], now)
        self._mem.move_to_end(digest)
        on_disk = self._disk.get(digest)
        if on_disk is not None:  # one entry, one last access, whichever tier served it
            self._disk[digest] = (on_disk[0], on_disk[1], now)
            self._disk.move_to_end(digest)
        return hit[0]

    def load_failed(self) -> None:
        """Count a load that failed (its result is not cached)."""
        self.metrics.cache_event(self.CACHE, "cache_load_failure")

    def contains(self, key: ChunkKey) -> bool:
        """Whether the chunk is cached (memory or disk index), without counting a lookup."""
        digest = key.digest()
        with self._lock:
            return digest in self._mem or digest in self._disk

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait (at most timeout_s) until every queued disk write is done; True if so."""
        with self._written:
            return self._written.wait_for(lambda: self._writing_bytes == 0, timeout=timeout_s)

    def close(self) -> None:
        """Waits for the queued disk writes, and lets go of the memory tier and the kept
        mappings at once (views handed out stay valid): a closed cache serves nothing, and
        its chunks' memory should not wait for the cache to be collected."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
        with self._lock:
            self._mem.clear()
            self._mem_bytes = 0
            self._open.clear()
        self._report_size()

    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    @property
    def disk_bytes(self) -> int:
        return self._disk_bytes

    # -- memory tier ---------------------------------------------------------------------
    def _expired(self, last: float, now: float) -> bool:
        return self._retention_s is not None and now - last > self._retention_s

    def _put_memory(self, digest: str, data: bytes, now: float) -> None:
        if self._memory_cap == 0 or (0 < self._memory_cap < len(data)):
            return
        with self._lock:
            old = self._mem.pop(digest, None)
            if old is not None:
                self._mem_bytes -= len(old[0])
            self._mem[digest] = (data, now)
            self._mem_bytes += len(data)
            if self._memory_cap > 0:
                while self._mem_bytes > self._memory_cap and self._mem:
                    _, (gone, _) = self._mem.popitem(last=False)
                    self._mem_bytes -= len(gone)
                    if not self._dirs:  # memory is the whole cache: an eviction
                        self.metrics.cache_event(self.CACHE, "cache_eviction")
                        self.metrics.cache_event(self.CACHE, "cache_eviction_weight",
                                                 len(gone))
        self._report_size()

    # -- disk tier -----------------------------------------------------------------------
    def _dir_for(self, digest: str) -> Path:
        return self._dirs[crc32c(digest.encode()) % len(self._dirs)]

    def _write_entry(self, digest: str, key: ChunkKey, data: bytes, put: object) -> None:
        tmp = None
        try:
            key_bytes = key.text().encode()
            header = _HEADER.pack(_MAGIC, _VERSION, len(key_bytes), len(data),
                                  crc32c(data, crc32c(key_bytes)))
            root = self._dir_for(digest)
            final = root / digest[:2] / f"{digest}{_SUFFIX}"
            tmp = root / "tmp" / f"{digest}.{os.getpid()}.{threading.get_ident()}.tmp"
            final.parent.mkdir(exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(key_bytes)
                f.write(data)
                # on disk before it counts as checked: a write-back that failed later in
                # this process could not be seen by the whole-entry check
                os.fsync(f.fileno())
            size = _HEADER.size + len(key_bytes) + len(data)
            with self._entry_lock(digest):
                with self._lock:
                    current = self._latest_put.get(digest) is put
                if not current:
                    return  # a later fetch's bytes supersede these: never on disk
                os.replace(tmp, final)
                tmp = None
                st = os.stat(final)
                self._register_written(digest, final, size, st)
            self._report_size()
        except OSError:
            pass  # a full or failing disk makes the entry memory-only; reads are unaffected
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            self._write_done(digest, len(data))

    def _entry_lock(self, digest: str) -> threading.Lock:
        return self._entry_locks[hash(digest) % _ENTRY_LOCK_STRIPES]

    def _register_written(self, digest: str, final: Path, size: int, st) -> None:
        """Indexes an entry just renamed into place (checked by construction), evicting
        what the disk bound requires."""
        with self._lock:
            old = self._disk.pop(digest, None)
            if old is not None:
                self._disk_bytes -= old[1]
            self._open.pop(digest, None)  # a mapping of the file replaced
            self._disk[digest] = (final, size, self._clock())
            self._disk_bytes += size
            self._verified[digest] = (st.st_ino, st.st_size, st.st_mtime_ns)
            victims = self._evict_disk_locked()
        for path in victims:
            with contextlib.suppress(OSError):
                path.unlink()

    def _write_done(self, digest: str, nbytes: int) -> None:
        with self._lock:
            self._writing_bytes -= nbytes
            left = self._queued_writes.pop(digest, 1) - 1
            if left:
                self._queued_writes[digest] = left
            else:
                self._latest_put.pop(digest, None)
            self._written.notify_all()

    def _evict_disk_locked(self) -> list[Path]:
        victims = []
        if self._disk_cap < 0:
            return victims
        while self._disk_bytes > self._disk_cap and self._disk:
            digest, (path, size, _) = self._disk.popitem(last=False)
            self._verified.pop(digest, None)
            self._open.pop(digest, None)
            self._disk_bytes -= size
            victims.append(path)
            self.metrics.cache_event(self.CACHE, "cache_eviction")
            self.metrics.cache_event(self.CACHE, "cache_eviction_weight", size)
        return victims

    def _drop_disk_locked(self, digest: str, *, evicted: bool) -> None:
        self._verified.pop(digest, None)
        self._open.pop(digest, None)
        path, size, _ = self._disk.pop(digest)
        self._disk_bytes -= size
        with contextlib.suppress(OSError):
            path.unlink()
        if evicted:
            self.metrics.cache_event(self.CACHE, "cache_eviction")
            self.metrics.cache_event(self.CACHE, "cache_eviction_weight", size)

    def _read_entry(self, path: Path, key: ChunkKey) -> memoryview | None:
        """A read-only view of the entry's data (a mapping of the file) if the whole file
        checks out, or checked out before under the same file identity; else None."""
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_size < _HEADER.size:
                    return None
                if st.st_size < _MAP_MIN_BYTES:
                    raw = memoryview(f.read())
                else:
                    raw = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            return None
        magic, version, key_len, data_len, crc = _HEADER.unpack_from(raw)
        if magic != _MAGIC or version != _VERSION or \
                len(raw) != _HEADER.size + key_len + data_len:
            return None
        if raw[_HEADER.size:_HEADER.size + key_len] != key.text().encode():
            return None
        digest = key.digest()
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            checked = self._verified.get(digest) == identity
        if not checked:
            body = raw[_HEADER.size:]
            if crc32c(body[key_len:], crc32c(body[:key_len])) != crc:
                return None
            with self._lock:
                if digest in self._disk:
                    self._verified[digest] = identity
        data = raw[_HEADER.size + key_len:]
        if isinstance(raw.obj, mmap.mmap):
            with self._lock:
                on_disk = self._disk.get(digest)
                if on_disk is not None and on_disk[0] == path and \
                        self._verified.get(digest) == identity:
                    self._open[digest] = data
                    self._open.move_to_end(digest)
                    if len(self._open) > _OPEN_MAPPINGS:
                        self._open.popitem(last=False)
        return data

    def _reopen(self) -> None:
        """Index the entries already on disk (oldest access first) and delete leftovers."""
        found = []
        for root in self._dirs:
            for tmp in (root / "tmp").iterdir():
                with contextlib.suppress(OSError):
                    tmp.unlink()
            for sub in root.iterdir():
                if sub.name == "tmp" or not sub.is_dir():
                    continue
                for entry in sub.iterdir():
                    if not entry.name.endswith(_SUFFIX):
                        continue
                    try:
                        st = entry.stat()
                    except OSError:
                        continue
                    found.append((st.st_mtime, entry.name[:-len(_SUFFIX)], entry,
                                  st.st_size))
        found.sort()
        now = self._clock()
        for _, digest, path, size in found:
            if digest in self._disk:  # the same entry in two dirs: keep one
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            self._disk[digest] = (path, size, now)
            self._disk_bytes += size
        for path in self._evict_disk_locked():
            with contextlib.suppress(OSError):
                path.unlink()

    def _report_size(self) -> None:
        self.metrics.set_cache_size(self.CACHE, self._mem_bytes + self._disk_bytes)


def _holds_more(data) -> bool:
    """Whether a memoryview is a slice of a larger buffer (so caching it would hold more
    bytes than it counts)."""
    if not isinstance(data, memoryview):
        return False
    try:
        return data.obj is None or len(data.obj) != data.nbytes
    except TypeError:
        return True


class LoadingCache:
    """A small LRU of loaded values (manifests, segment indexes): at most `max_weight`
    (entries, or bytes with `weigher=len`; -1 = unbounded), entries expire `retention_ms`
    after their last access, concurrent loads of one key share one call of the loader, and
    a loader's exception is raised to every waiter and never cached."""

    def __init__(self, name: str, max_weight: int, retention_ms: int = -1, *,
                 weigher: Callable[[object], int] | None = None,
                 metrics: ObjectStoreMetrics | None = None, clock=time.monotonic):
        self.name = name
        self.metrics = metrics if metrics is not None else ObjectStoreMetrics()
        self._max = max_weight
        self._retention_s = None if retention_ms < 0 else retention_ms / 1000.0
        self._weigher = weigher or (lambda _v: 1)
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[object, int, float]] = OrderedDict()
        self._weight = 0
        self._loading: dict[Hashable, concurrent.futures.Future] = {}

    def get(self, key: Hashable, loader: Callable[[], object], timeout_s: float | None = None):
        now = self._clock()
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and (self._retention_s is None
                                    or now - hit[2] <= self._retention_s):
                self._entries[key] = (hit[0], hit[1], now)
                self._entries.move_to_end(key)
                self.metrics.cache_event(self.name, "cache_hits")
                return hit[0]
            if hit is not None:
                self._remove_locked(key, evicted=True)
            self.metrics.cache_event(self.name, "cache_misses")
            fut = self._loading.get(key)
            owner = fut is None
            if owner:
                fut = self._loading[key] = concurrent.futures.Future()
        if not owner:
            return fut.result(timeout=timeout_s)
        try:
            value = loader()
        except BaseException as e:
            with self._lock:
                self._loading.pop(key, None)
            self.metrics.cache_event(self.name, "cache_load_failure")
            fut.set_exception(e)
            raise
        weight = self._weigher(value)
        with self._lock:
            self._loading.pop(key, None)
            if self._max < 0 or weight <= self._max:
                self._entries[key] = (value, weight, self._clock())
                self._weight += weight
                while self._max >= 0 and self._weight > self._max:
                    oldest = next(iter(self._entries))
                    self._remove_locked(oldest, evicted=True)
            self.metrics.set_cache_size(self.name, self._weight)
        self.metrics.cache_event(self.name, "cache_load_success")
        fut.set_result(value)
        return value

    def peek(self, key: Hashable):
        """The cached value, or None; never loads (for reads that must not block on I/O).
        Renews the entry's last access like a hit."""
        now = self._clock()
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or (self._retention_s is not None
                               and now - hit[2] > self._retention_s):
                return None
            self._entries[key] = (hit[0], hit[1], now)
            self._entries.move_to_end(key)
            return hit[0]

    def invalidate(self, key: Hashable) -> None:
        with self._lock:
            if key in self._entries:
                self._remove_locked(key, evicted=False)

    def __len__(self) -> int:
        return len(self._entries)

    def _remove_locked(self, key: Hashable, *, evicted: bool) -> None:
        _, weight, _ = self._entries.pop(key)
        self._weight -= weight
        if evicted:
            self.metrics.cache_event(self.name, "cache_eviction")
            self.metrics.cache_event(self.name, "cache_eviction_weight", weight)
