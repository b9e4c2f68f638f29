"""Kafka's RemoteIndexCache: the offset, time and transaction indexes of remote segments,
downloaded once and kept on local disk, memory-mapped, bounded by total size.

Files, in `cache_dir` (the RLM passes `<first log dir>/remote-log-index-cache`):

    <startOffset>_<segmentUuidBase64>.index       offset index   (start offset not padded)
    <startOffset>_<segmentUuidBase64>.timeindex   time index
    <startOffset>_<segmentUuidBase64>.txnindex    transaction index (empty when the segment
                                                  has none)

    <startOffset>_<segmentUuidBase64>.checksums   CRC-32C and size of each of the three,
                                                  written last

A download goes to `<file>.tmp` and is renamed into place, so a complete name is a complete
file; the RSM verified what it downloaded (`fetch_index_bytes`), and the `.checksums` file
records what was written. Nothing is fsynced (as Kafka's cache, which moves its files into
place without a flush): the files are a copy of the remote tier, the startup check below
drops any set a crash left torn, and fsyncs of four files and the directory would sit on
the first remote read of every segment. On startup the directory is created, leftover
`.tmp` and `.deleted` files are removed, complete sets whose files still match their
`.checksums` and pass the indexes' sanity checks are registered again (reused after a
restart), and incomplete, changed or corrupt sets are removed (downloaded again on use):
a cached file is never trusted just because it is there.

Eviction: least recently used first, once the files' total size exceeds
`remote.log.index.file.cache.total.size.bytes`; an entry larger than the whole bound is
returned to its caller but not kept. An evicted (or removed) entry's files are renamed to
`<file>.<n>.deleted` at once and unlinked when the last reference to the entry goes away:
a reader holding an entry keeps working after its eviction (its indexes stay mapped, its
transaction index file stays readable), which avoids Kafka's "entry marked for cleanup"
failures (KAFKA-17184, KAFKA-19971). A later lookup of the same segment downloads it again.

Loading: one thread downloads a given segment while the others asking for it wait and get
its result, or its error; a failed load is never cached, so the next call tries again.
Segments whose metadata says their transaction index is empty (KIP-1058) skip that
download. Lookups follow Kafka: `lookup_offset` is the offset index's position for the
offset; `lookup_timestamp` is the offset index's position for
max(starting_offset, time index lookup of the timestamp).

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

from engine.checksums import crc32c
from engine.common import Uuid, write_file_atomically
from engine.errors import RemoteStorageError
from engine.log.offset_index import OffsetIndex
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import TransactionIndex
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.segment_access import index_bytes
from engine.remote.storage import IndexType, RemoteStorageManager

__all__ = ["DIR_NAME", "RemoteIndexCache", "RemoteIndexCacheEntry"]

log = logging.getLogger(__name__)

#: Kafka's RemoteIndexCache.DIR_NAME, under the first log dir.
DIR_NAME = "remote-log-index-cache"
_SUFFIXES = {IndexType.OFFSET: ".index", IndexType.TIMESTAMP: ".timeindex",
             IndexType.TRANSACTION: ".txnindex"}
_TMP, _DELETED = ".tmp", ".deleted"
_CHECKSUMS = ".checksums"


class RemoteIndexCacheEntry:
    """The three indexes of one remote segment. Read-only; usable after eviction for as
    long as it is referenced."""

    def __init__(self, segment_id: Uuid, start_offset: int, offset_index: OffsetIndex,
                 time_index: TimeIndex, txn_index: TransactionIndex):
        self.segment_id = segment_id
        self.start_offset = start_offset
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.size_bytes = (offset_index.length + time_index.length
                           + _file_size(txn_index.file))
        self.evicted = False

    def lookup_offset(self, offset: int) -> int:
        return self.offset_index.lookup(offset).position

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> int:
        offset = self.time_index.lookup(timestamp).offset
        return self.offset_index.lookup(max(starting_offset, offset)).position

    def files(self) -> list[Path]:
        return [self.offset_index.file, self.time_index.file, self.txn_index.file]

    def __repr__(self):
        return (f"RemoteIndexCacheEntry({self.start_offset}_{self.segment_id}, "
                f"{self.size_bytes} bytes{', evicted' if self.evicted else ''})")


class _Load:
    """A download in progress: waiters block on `done` and then read `entry` / `error`."""

    def __init__(self):
        self.done = threading.Event()
        self.entry: RemoteIndexCacheEntry | None = None
        self.error: BaseException | None = None
        self.removed = False


class RemoteIndexCache:
    """See the module docstring.

    Args:
        rsm: where indexes are downloaded from (`fetch_index`).
        cache_dir: the cache directory (created if missing).
        max_size_bytes: bound on the files' total size (>= 1).
    """

    def __init__(self, rsm: RemoteStorageManager, cache_dir, max_size_bytes: int = 1 << 30):
        if max_size_bytes < 1:
            raise ValueError(f"max_size_bytes must be >= 1, got {max_size_bytes}")
        self.rsm = rsm
        self._dir = Path(cache_dir)
        self._max = int(max_size_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Uuid, RemoteIndexCacheEntry] = OrderedDict()
        self._loading: dict[Uuid, _Load] = {}
        self._total = 0
        self._serial = 0
        self._closed = False
        self.hits = self.misses = self.loads = self.load_failures = self.evictions = 0
        self._dir.mkdir(parents=True, exist_ok=True)
        self._init_from_disk()

    # -- public API ----------------------------------------------------------------------

    @property
    def cache_dir(self) -> Path:
        return self._dir

    @property
    def max_size_bytes(self) -> int:
        return self._max

    @property
    def size_bytes(self) -> int:
        """Total size of the cached entries' files."""
        with self._lock:
            return self._total

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, segment_id) -> bool:
        with self._lock:
            return segment_id in self._entries

    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry:
        """The segment's entry, downloading its indexes if they are not cached.

        Raises:
            RemoteStorageError: a download failed (not cached: the next call retries).
            CorruptIndexError: a downloaded index failed its sanity check.
        """
        key = metadata.remote_log_segment_id.id
        while True:
            with self._lock:
                entry = self._hit(key)
                if entry is not None:
                    return entry
                load = self._loading.get(key)
                if load is None:
                    load = self._loading[key] = _Load()
                    self.misses += 1
                    break
            load.done.wait()
            if load.error is not None:
                raise load.error
            if load.entry is not None:
                return load.entry
        return self._load(key, load, metadata)

    def cached_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry | None:
        """The segment's entry if it is cached, else None: never downloads or waits for a
        load, so a caller that must not block can try it first."""
        with self._lock:
            return self._hit(metadata.remote_log_segment_id.id)

    def _hit(self, key) -> RemoteIndexCacheEntry | None:
        """The cached entry of `key`, marked recently used; the caller holds the lock."""
        self._check_open()
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        return entry

    def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """Byte position in the remote `.log` to start reading for `offset`."""
        return self.get_index_entry(metadata).lookup_offset(offset)

    def lookup_timestamp(self, metadata: RemoteLogSegmentMetadata, timestamp: int,
                         starting_offset: int) -> int:
        """Byte position to start searching for the first record with a timestamp >=
        `timestamp`, not before `starting_offset`."""
        return self.get_index_entry(metadata).lookup_timestamp(timestamp, starting_offset)

    def remove(self, segment_id: Uuid) -> bool:
        """Drops a segment's entry (its files go once no reader holds it); a load in
        progress is not kept. Returns whether an entry was cached."""
        with self._lock:
            if segment_id in self._loading:
                self._loading[segment_id].removed = True
            entry = self._entries.pop(segment_id, None)
            if entry is None:
                return False
            self._total -= entry.size_bytes
            self._retire(entry)
            return True

    def remove_all(self, segment_ids=None) -> None:
        """Drops the given entries, or every entry."""
        with self._lock:
            keys = list(self._entries) if segment_ids is None else list(segment_ids)
        for key in keys:
            self.remove(key)
        if segment_ids is None:
            with self._lock:
                for load in self._loading.values():
                    load.removed = True

    def resize(self, max_size_bytes: int) -> None:
        """Changes the bound (Kafka's resizeCacheSize), evicting at once if needed."""
        if max_size_bytes < 1:
            raise ValueError(f"max_size_bytes must be >= 1, got {max_size_bytes}")
        with self._lock:
            self._max = int(max_size_bytes)
            self._evict_over_bound()

    def close(self) -> None:
        """Forgets every entry; their files stay on disk for the next start (mappings go
        when no reader holds them). Idempotent; later lookups raise RemoteStorageError."""
        with self._lock:
            self._closed = True
            self._entries.clear()
            self._total = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"RemoteIndexCache({str(self._dir)!r}, {len(self)} entries, "
                f"{self.size_bytes}/{self._max} bytes)")

    # -- loading -------------------------------------------------------------------------

    def _load(self, key: Uuid, load: _Load, metadata: RemoteLogSegmentMetadata
              ) -> RemoteIndexCacheEntry:
        try:
            entry = self._download(metadata)
        except BaseException as exc:
            with self._lock:
                self.load_failures += 1
                del self._loading[key]
            load.error = exc
            load.done.set()
            raise
        with self._lock:
            del self._loading[key]
            self.loads += 1
            if load.removed or self._closed:
                self._retire(entry)
            else:
                self._entries[key] = entry
                self._total += entry.size_bytes
                self._evict_over_bound()
        load.entry = entry
        load.done.set()
        return entry

    def _download(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexCacheEntry:
        stem = self._dir / f"{metadata.start_offset}_{metadata.remote_log_segment_id.id}"
        paths = {t: stem.with_name(stem.name + s) for t, s in _SUFFIXES.items()}
        sums = stem.with_name(stem.name + _CHECKSUMS)
        try:
            written = {}
            for index_type, path in paths.items():
                data = index_bytes(self.rsm, metadata, index_type)
                write_file_atomically(path, data, sync=False)
                written[_SUFFIXES[index_type]] = (crc32c(data), len(data))
            # the files are in place before the record of them: a crash leaves no .checksums
            # (the set is dropped at the next start) or a complete, matching one
            write_file_atomically(sums, _encode_checksums(written), sync=False)
            return self._open_entry(metadata.remote_log_segment_id.id, metadata.start_offset,
                                    paths)
        except BaseException:
            for path in (*paths.values(), sums):
                _unlink_quietly(path)
                _unlink_quietly(path.with_name(path.name + _TMP))
            raise

    @staticmethod
    def _open_entry(segment_id: Uuid, start_offset: int, paths) -> RemoteIndexCacheEntry:
        offset_index = OffsetIndex(paths[IndexType.OFFSET], start_offset, writable=False)
        try:
            time_index = TimeIndex(paths[IndexType.TIMESTAMP], start_offset, writable=False)
        except BaseException:
            offset_index.close()
            raise
        txn_index = TransactionIndex(start_offset, paths[IndexType.TRANSACTION])
        entry = RemoteIndexCacheEntry(segment_id, start_offset, offset_index, time_index,
                                      txn_index)
        try:
            offset_index.sanity_check()
            time_index.sanity_check()
            txn_index.sanity_check()
        except BaseException:
            offset_index.close()
            time_index.close()
            raise
        return entry

    # -- eviction ------------------------------------------------------------------------

    def _evict_over_bound(self) -> None:
        """Evicts least recently used entries while over the bound (lock held)."""
        while self._total > self._max and self._entries:
            _, entry = self._entries.popitem(last=False)
            self._total -= entry.size_bytes
            self.evictions += 1
            self._retire(entry)

    def _retire(self, entry: RemoteIndexCacheEntry) -> None:
        """Renames the entry's files to `.deleted` names and unlinks them when the entry
        object is freed (lock held)."""
        entry.evicted = True
        self._serial += 1
        renamed = []
        for index in (entry.offset_index, entry.time_index, entry.txn_index):
            old = index.file
            new = old.with_name(f"{old.name}.{self._serial}{_DELETED}")
            try:
                index.rename_to(new)
                renamed.append(new)
            except OSError as exc:  # the startup cleanup will catch what is left
                log.warning("cannot rename evicted remote index %s: %s", old, exc)
        # without its record the set is dropped at the next start, whatever is left of it
        _unlink_quietly(entry.offset_index.file.with_name(
            f"{entry.start_offset}_{entry.segment_id}{_CHECKSUMS}"))
        weakref.finalize(entry, _unlink_all, renamed)

    # -- startup -------------------------------------------------------------------------

    def _init_from_disk(self) -> None:
        sets: dict[str, dict[str, Path]] = {}
        for path in self._dir.iterdir():
            name = path.name
            if name.endswith((_TMP, _DELETED)):
                _unlink_quietly(path)
                continue
            stem, dot, suffix = name.rpartition(".")
            if dot and ("." + suffix in _SUFFIXES.values() or "." + suffix == _CHECKSUMS):
                sets.setdefault(stem, {})["." + suffix] = path
        found = []
        for stem, files in sets.items():
            parsed = _parse_stem(stem)
            if parsed is None or len(files) != len(_SUFFIXES) + 1:
                for path in files.values():  # a partial set, or not one of ours
                    _unlink_quietly(path)
                continue
            start_offset, segment_id = parsed
            paths = {t: files[s] for t, s in _SUFFIXES.items()}
            try:
                _verify_files(files)
                entry = self._open_entry(segment_id, start_offset, paths)
            except Exception as exc:  # noqa: BLE001 - corrupt or unreadable: dropped, refetched
                log.warning("dropping cached remote indexes %s: %s", stem, exc)
                for path in files.values():
                    _unlink_quietly(path)
                continue
            found.append((max(p.stat().st_mtime_ns for p in files.values()), entry))
        with self._lock:
            for _, entry in sorted(found, key=lambda item: item[0]):
                self._entries[entry.segment_id] = entry
                self._total += entry.size_bytes
            self._evict_over_bound()

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"RemoteIndexCache {self._dir} is closed")


def _encode_checksums(files: dict[str, tuple[int, int]]) -> bytes:
    lines = [f"{suffix} {crc:08x} {size}" for suffix, (crc, size) in sorted(files.items())]
    body = "\n".join(lines) + "\n"
    return f"{body}crc {crc32c(body.encode()):08x}\n".encode()


def _verify_files(files: dict[str, Path]) -> None:
    """Checks each index file of a cached set against its `.checksums`; ValueError (the set
    is then dropped) for a changed, truncated or unrecorded file."""
    text = files[_CHECKSUMS].read_bytes().decode("ascii", "replace")
    body, _, tail = text.rpartition("crc ")
    if not tail.strip() or f"{crc32c(body.encode()):08x}" != tail.strip():
        raise ValueError(f"{files[_CHECKSUMS]} is damaged")
    expected = {}
    for line in body.splitlines():
        suffix, crc, size = line.split()
        expected[suffix] = (int(crc, 16), int(size))
    for suffix in _SUFFIXES.values():
        data = files[suffix].read_bytes()
        if expected.get(suffix) != (crc32c(data), len(data)):
            raise ValueError(f"{files[suffix]} does not match the CRC-32C and size recorded "
                             "when it was downloaded")


def _parse_stem(stem: str) -> tuple[int, Uuid] | None:
    start, sep, uuid = stem.partition("_")  # the Uuid's base64 may itself contain "_"
    if not sep or not start.isdigit():
        return None
    try:
        return int(start), Uuid.from_string(uuid)
    except ValueError:
        return None


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot delete %s: %s", path, exc)


def _unlink_all(paths) -> None:
    for path in paths:
        _unlink_quietly(path)
