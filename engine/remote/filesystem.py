"""A RemoteStorageManager over plain directories: local disks, or a mounted NFS/HDFS/FUSE path.

Layout (the same names as Kafka's LocalTieredStorage, so a tree can be compared with one):

    <dir>/kafka-tiered-storage/<topic>-<partition>-<topicIdBase64>/
        <20-digit start offset>-<segmentUuidBase64>.log
        ...                                         .index
        ...                                         .timeindex
        ...                                         .txnindex         only if the segment had one
        ...                                         .snapshot         empty if the log had none
        ...                                         .leader_epoch_checkpoint

Placement: a partition lives in one of the configured dirs, chosen by rendezvous (highest
random weight) hashing of `<dir>` and `<topicIdBase64>-<partition>`, so a read finds it
without listing anything. When the dir list changes, only the partitions whose top-ranked dir
changed place their *new* segments elsewhere (about 1/n of them when a dir is added); reads
try the dirs in rank order, so segments written under the old list are still found (one
failed open per dir ranked above theirs), and deletes remove a segment's files from every
dir. Removing a dir from the list makes the segments stored only there unreachable.

Writes are crash-safe and idempotent: each file is written to `<name>.tmp` (truncated first,
so a retry overwrites whatever a failed attempt left), fsynced, renamed into place, and the
partition directory is fsynced; the `.log` is renamed last, after a directory fsync, so a
`.log` in place means the whole set is. A failed copy removes what it wrote.

Checksums: the copy returns KIP-917 custom metadata holding the CRC-32C and size of every
stored file (`SegmentChecksums`, at most 56 bytes, under Kafka's default 128-byte
`remote.log.metadata.custom.metadata.max.bytes`):

    byte 0      format version (1)
    byte 1      bitmask of stored files, bit i = FILE_SUFFIXES[i] (.log, .index, .timeindex,
                .txnindex, .snapshot, .leader_epoch_checkpoint)
    then, for each stored file in that order:
                crc32c  uint32 big-endian
                size    unsigned LEB128 varint (bytes)

Reads check them when the metadata carries them (a COPY_SEGMENT_FINISHED segment does):
`fetch_index` reads the whole file and checks its size and CRC every time; `.log` reads
check the file size whenever they open the file and, with `log.read.verification=full` (the
default), the CRC of the whole `.log` on the first read of the segment in this process; the
verdict is cached per segment id and (inode, size, mtime). `read_range` keeps the `.log`
files of the 128 most recently read segments open (reference-counted, so eviction never
closes a file under a read; deleting a segment drops its file), so a ranged read is one
pread; `map_range` hands out read-only views of a mapping of the open file instead (no
copy; stored files are immutable, so the views stay valid, even after the file is deleted). A mismatch raises RemoteStorageError naming the file. Metadata without custom
metadata (another RSM's, or a segment still being copied) is read unchecked.

Errors: a missing file raises RemoteResourceNotFoundError, any other OSError
RemoteStorageError; both name the path.

Thread-safety: every method may be called from any number of threads; only the open-file
cache (and its mappings) lives between calls, and all file I/O releases the GIL (a
`map_range` view's page faults happen where its bytes are read).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.checksums import crc32c
from engine.common import fsync_dir
from engine.config import ConfigError
from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from engine.remote.storage import IndexType, LogSegmentData, RemoteStorageManager

__all__ = [
    "FILE_SUFFIXES",
    "ROOT_DIR_NAME",
    "FileSystemRemoteStorageManager",
    "SegmentChecksums",
]

ROOT_DIR_NAME = "kafka-tiered-storage"
LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCH = (
    ".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint")
#: The stored files in custom-metadata bit order.
FILE_SUFFIXES = (LOG, OFFSET_INDEX, TIME_INDEX, TXN_INDEX, SNAPSHOT, LEADER_EPOCH)
_INDEX_SUFFIX = {
    IndexType.OFFSET: OFFSET_INDEX,
    IndexType.TIMESTAMP: TIME_INDEX,
    IndexType.TRANSACTION: TXN_INDEX,
    IndexType.PRODUCER_SNAPSHOT: SNAPSHOT,
    IndexType.LEADER_EPOCH: LEADER_EPOCH,
}
_TMP = ".tmp"
# copy_file_range in slices this size, each CRC'd right after from the still-cache-hot source
# pages: 0.9x a plain kernel copy on one core, where copy-then-CRC was 0.77x (bench/).
_COPY_SLICE = 256 << 10
# Map sources with every page at once: faulting 4 KiB pages one by one cost 0.6x a raw copy
# with 4 copier threads on 2 cores, populated mappings 1.3x (bench/compare_remote_copy.py).
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
_VERIFY_CACHE_SIZE = 8192
_OPEN_LOG_CACHE_SIZE = 128
_VERIFY_LOCK_STRIPES = 64
_NO_COPY_FILE_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP,
                       getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
_VERIFICATION_MODES = ("full", "size")


# ---- custom metadata ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SegmentChecksums:
    """CRC-32C and size of each stored file, by suffix (see the module docstring)."""

    VERSION = 1
    files: Mapping[str, tuple[int, int]]

    def encode(self) -> bytes:
        mask, body = 0, bytearray()
        for bit, suffix in enumerate(FILE_SUFFIXES):
            if suffix in self.files:
                crc, size = self.files[suffix]
                mask |= 1 << bit
                body += crc.to_bytes(4, "big")
                while True:
                    low, size = size & 0x7F, size >> 7
                    body.append(low | (0x80 if size else 0))
                    if not size:
                        break
        return bytes((self.VERSION, mask)) + bytes(body)

    @classmethod
    def decode(cls, data: bytes) -> SegmentChecksums:
        """Raises ValueError for bytes this format did not write."""
        if len(data) < 2 or data[0] != cls.VERSION or data[1] >> len(FILE_SUFFIXES):
            raise ValueError(f"not filesystem-tier checksums (version {cls.VERSION}): "
                             f"{bytes(data[:8]).hex()}")
        files, pos = {}, 2
        for bit, suffix in enumerate(FILE_SUFFIXES):
            if not data[1] >> bit & 1:
                continue
            if pos + 5 > len(data):
                raise ValueError(f"checksums truncated at byte {pos} of {len(data)}")
            crc, pos = int.from_bytes(data[pos:pos + 4], "big"), pos + 4
            size = shift = 0
            while True:
                if pos >= len(data) or shift > 56:
                    raise ValueError(f"bad size varint for {suffix} at byte {pos}")
                byte = data[pos]
                pos += 1
                size |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            files[suffix] = (crc, size)
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes after the checksums")
        return cls(files)

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata) -> SegmentChecksums | None:
        """The checksums carried by `metadata`, None if it has no custom metadata.
        RemoteStorageError if it has some this format cannot read."""
        if metadata.custom_metadata is None:
            return None
        try:
            return _decode_checksums(metadata.custom_metadata)
        except ValueError as exc:
            raise RemoteStorageError(f"custom metadata of {metadata.remote_log_segment_id} "
                                     f"was not written by the filesystem tier: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _decode_checksums(data: bytes) -> SegmentChecksums:
    return SegmentChecksums.decode(data)


# ---- open .log files ---------------------------------------------------------------------

class _OpenLog:
    """An open, checked `.log`. `refs` counts the cache's hold plus each read in progress;
    the fd is closed when it drops to 0, so eviction never closes it under a reader.
    `mapped` is its read-only mapping once `map_range` made one: it is never closed
    explicitly, only dropped, so views handed out keep it mapped (their buffer export holds
    the mmap object) and it is unmapped when the last of them goes."""

    __slots__ = ("fd", "mapped", "path", "refs", "size")

    def __init__(self, fd: int, path: Path, size: int):
        self.fd, self.path, self.size, self.refs = fd, path, size, 1
        self.mapped: mmap.mmap | None = None


class _OpenLogCache:
    """The `.log` files of recently read segments, kept open (LRU, `capacity` files): a read
    then costs one pread instead of open + fstat + pread + close."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._lock = threading.Lock()
        self._files: OrderedDict = OrderedDict()

    def acquire(self, key) -> _OpenLog | None:
        with self._lock:
            f = self._files.get(key)
            if f is not None:
                f.refs += 1
                self._files.move_to_end(key)
            return f

    def insert(self, key, f: _OpenLog) -> _OpenLog:
        """Caches `f` (opened by the caller, who holds its one reference) and returns it,
        or the file another thread cached meanwhile (then `f` is closed)."""
        closing = []
        with self._lock:
            existing = self._files.get(key)
            if existing is not None:
                existing.refs += 1
                closing.append(f)  # the caller's reference, dropped below
                f = existing
            else:
                f.refs += 1  # the cache's hold
                self._files[key] = f
                while len(self._files) > self._capacity:
                    closing.append(self._files.popitem(last=False)[1])
            closing = [c for c in closing if self._drop(c)]
        for c in closing:
            os.close(c.fd)
        return f

    def release(self, f: _OpenLog) -> None:
        with self._lock:
            closing = self._drop(f)
        if closing:
            os.close(f.fd)

    def discard(self, segment_id) -> None:
        """Forgets the segment's open files (closed once their reads end)."""
        self._discard(lambda key: key[0] == segment_id)

    def clear(self) -> None:
        self._discard(lambda key: True)

    def _discard(self, match) -> None:
        with self._lock:
            keys = [k for k in self._files if match(k)]
            closing = [f for f in (self._files.pop(k) for k in keys) if self._drop(f)]
        for f in closing:
            os.close(f.fd)

    def set_mapping(self, f: _OpenLog, mapped: mmap.mmap) -> mmap.mmap:
        """Keeps `mapped` as f's mapping unless another thread set one first; returns the
        one kept (a mapping that loses the race is dropped, never closed)."""
        with self._lock:
            if f.mapped is None:
                f.mapped = mapped
            return f.mapped

    @staticmethod
    def _drop(f: _OpenLog) -> bool:
        """Drops one reference (lock held); True if the fd must now be closed. The mapping
        is dropped with it: live views keep it mapped (see _OpenLog)."""
        f.refs -= 1
        if f.refs == 0:
            f.mapped = None
            return True
        return False


# ---- configuration -----------------------------------------------------------------------

def _parse_dirs(value) -> list[Path]:
    if value is None:
        raise ConfigError("dirs", None, "required: comma-separated absolute directories")
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    dirs, seen = [], {}
    for raw in items:
        text = str(raw).strip()
        if not text:
            raise ConfigError("dirs", value, "empty directory name in the list")
        if not os.path.isabs(text):
            raise ConfigError("dirs", value, f"{text!r} is not an absolute path")
        norm = os.path.normpath(text)
        real = os.path.realpath(norm)
        if real in seen:
            raise ConfigError("dirs", value, f"{text!r} is the same directory as {seen[real]!r}")
        seen[real] = text
        dirs.append(Path(norm))
    return dirs


def _parse_bool(key: str, value, default: bool) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(key, value, "expected true or false")
    return text == "true"


# ---- the manager -------------------------------------------------------------------------

class FileSystemRemoteStorageManager(RemoteStorageManager):
    """The filesystem tier. Construct with `dirs` (then ready) or empty and `configure`.

    Config keys (`rsm.config.` prefix stripped): `dirs` (required, comma-separated absolute
    paths, no duplicates), `broker.id` (int), `fsync` (true/false, default true: false only
    for tests and benchmarks on throwaway data), `log.read.verification` (`full` or `size`).
    """

    zero_copy_ranges = True  # map_range views a mapping of the stored, immutable file

    def __init__(self, dirs=None, *, fsync: bool = True, log_read_verification: str = "full",
                 broker_id: int = -1):
        self._roots: list[Path] = []
        self._fsync = bool(fsync)
        self._verification = log_read_verification
        self.broker_id = int(broker_id)
        self._verified: OrderedDict = OrderedDict()
        self._verified_lock = threading.Lock()
        self._verify_locks = [threading.Lock() for _ in range(_VERIFY_LOCK_STRIPES)]
        self._open_logs = _OpenLogCache(_OPEN_LOG_CACHE_SIZE)
        self._closed = False
        if dirs is not None:
            self._set_dirs(_parse_dirs(list(map(str, dirs))))

    def configure(self, configs: Mapping[str, str]) -> None:
        """Creates each dir's `kafka-tiered-storage` root (and a missing dir: the broker's
        config file loader, engine.config.load_broker_config, requires its parent to exist,
        and the commands create it first, logged). Raises ConfigError naming the key for a missing or invalid value or a root
        that cannot be created."""
        mode = str(configs.get("log.read.verification", "full")).strip()
        if mode not in _VERIFICATION_MODES:
            raise ConfigError("log.read.verification", configs["log.read.verification"],
                              f"must be one of {list(_VERIFICATION_MODES)}")
        broker_id = configs.get("broker.id", -1)
        try:
            broker_id = int(str(broker_id).strip())
        except ValueError:
            raise ConfigError("broker.id", configs["broker.id"], "expected an int") from None
        fsync = _parse_bool("fsync", configs.get("fsync"), True)
        dirs = _parse_dirs(configs.get("dirs"))
        self._fsync, self._verification, self.broker_id = fsync, mode, broker_id
        self._set_dirs(dirs)

    def _set_dirs(self, dirs: list[Path]) -> None:
        for d in dirs:
            try:
                (d / ROOT_DIR_NAME).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError("dirs", ",".join(map(str, dirs)),
                                  f"cannot create {d / ROOT_DIR_NAME}: {exc}") from None
        self._roots = [d / ROOT_DIR_NAME for d in dirs]

    @property
    def dirs(self) -> list[Path]:
        """The configured dirs (each holds a `kafka-tiered-storage` root)."""
        return [r.parent for r in self._roots]

    # -- naming and placement ------------------------------------------------------------

    @staticmethod
    def partition_dir_name(tip: TopicIdPartition) -> str:
        """`<topic>-<partition>-<topicIdBase64>`; ValueError for a topic that is not a
        single path component."""
        topic = tip.topic
        if not topic or topic in (".", "..") or "/" in topic or "\0" in topic or "\\" in topic:
            raise ValueError(f"topic {topic!r} cannot name a directory")
        return f"{topic}-{tip.partition}-{tip.topic_id}"

    @staticmethod
    def segment_file_name(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """`<20-digit start offset>-<segmentUuidBase64><suffix>`."""
        return f"{metadata.start_offset:020d}-{metadata.remote_log_segment_id.id}{suffix}"

    def _ranked_roots(self, tip: TopicIdPartition) -> list[Path]:
        """The roots in rendezvous order for this partition (first: where copies go)."""
        if not self._roots:
            raise RemoteStorageError("FileSystemRemoteStorageManager is not configured: "
                                     "no dirs")
        key = f"\0{tip.topic_id}-{tip.partition}".encode()
        return sorted(self._roots, key=lambda r: (-crc32c(str(r.parent).encode() + key),
                                                  str(r)))

    def partition_dir(self, tip: TopicIdPartition) -> Path:
        """Where this partition's new segments are written."""
        return self._ranked_roots(tip)[0] / self.partition_dir_name(tip)

    def segment_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> Path:
        """Path of one stored file in the partition's current dir (reads also probe the
        other dirs; see the module docstring)."""
        return (self.partition_dir(metadata.topic_id_partition)
                / self.segment_file_name(metadata, suffix))

    def _candidates(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> list[Path]:
        tip = metadata.topic_id_partition
        name = self.segment_file_name(metadata, suffix)
        pdir = self.partition_dir_name(tip)
        return [root / pdir / name for root in self._ranked_roots(tip)]

    def _open_stored(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> tuple[int, Path]:
        """(fd, path) of a stored file, probing the dirs in rank order."""
        self._check_open()
        candidates = self._candidates(metadata, suffix)
        for path in candidates:
            try:
                return os.open(path, os.O_RDONLY | os.O_CLOEXEC), path
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _storage_error(exc, f"cannot open {path}") from None
        where = (f" (nor in the {len(candidates) - 1} other dirs)"
                 if len(candidates) > 1 else "")
        raise RemoteResourceNotFoundError(
            f"remote file {candidates[0]} of {metadata.remote_log_segment_id} not found{where}",
            file=str(candidates[0]))

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError("FileSystemRemoteStorageManager is closed")

    # -- copy ----------------------------------------------------------------------------

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              segment_data: LogSegmentData) -> bytes:
        """Stores the segment's files (see the module docstring) and returns their
        checksums as custom metadata. Idempotent. RemoteStorageError naming the file on any
        failure (a missing source file too); what this attempt wrote is removed then."""
        self._check_open()
        tip = metadata.topic_id_partition
        pdir = self.partition_dir(tip)
        stored: dict[str, tuple[int, int]] = {}
        try:
            self._make_dir(pdir)
            sources: list[tuple[str, Path | bytes]] = [
                (OFFSET_INDEX, segment_data.offset_index),
                (TIME_INDEX, segment_data.time_index),
                (SNAPSHOT, segment_data.producer_snapshot or b""),
                (LEADER_EPOCH, bytes(segment_data.leader_epoch_index)),
            ]
            txn = segment_data.transaction_index
            if txn is not None and os.path.exists(txn):
                sources.append((TXN_INDEX, txn))
            else:  # a failed attempt may have stored one this attempt does not have
                _unlink(pdir / self.segment_file_name(metadata, TXN_INDEX))
            for suffix, source in sources:
                stored[suffix] = self._store(source, pdir / self.segment_file_name(metadata,
                                                                                     suffix))
            self._sync_dir(pdir)  # every other file is in place before the .log is
            stored[LOG] = self._store(segment_data.log_segment,
                                      pdir / self.segment_file_name(metadata, LOG))
            self._sync_dir(pdir)
        except BaseException as exc:
            self._remove_segment_files(metadata, [pdir.parent], missing_ok=True, quiet=True)
            if isinstance(exc, RemoteStorageError):
                raise _in_copy_of(exc, metadata) from None
            raise
        return SegmentChecksums(stored).encode()

    def _make_dir(self, pdir: Path) -> None:
        """Creates the partition dir, and the `kafka-tiered-storage` root if it went
        missing, but never the configured dir itself: an unmounted mount point must fail
        instead of filling the disk below it."""
        try:
            try:
                pdir.mkdir(exist_ok=True)
            except FileNotFoundError:
                pdir.parent.mkdir(exist_ok=True)
                pdir.mkdir(exist_ok=True)
        except OSError as exc:
            raise _storage_error(exc, f"cannot create {pdir}") from None

    def _sync_dir(self, path: Path) -> None:
        if self._fsync:
            try:
                fsync_dir(path)
            except OSError as exc:
                raise _storage_error(exc, f"cannot fsync directory {path}") from None

    def _store(self, source: Path | bytes, dest: Path) -> tuple[int, int]:
        """Writes `source` (a file or bytes) to `dest` through `dest.tmp`; (crc32c, size)."""
        tmp = dest.with_name(dest.name + _TMP)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            try:
                out = os.open(tmp, flags, 0o644)
            except FileNotFoundError:  # a delete of the partition's last segment removed it
                self._make_dir(dest.parent)
                out = os.open(tmp, flags, 0o644)
        except OSError as exc:
            raise _storage_error(exc, f"cannot create {tmp}") from None
        try:
            if isinstance(source, (bytes, bytearray, memoryview)):
                result = (crc32c(source), len(source))
                _write_all(out, memoryview(source), tmp)
            else:
                result = _copy_file(Path(source), out, tmp)
            if self._fsync:
                os.fsync(out)
        except OSError as exc:
            if isinstance(exc, RemoteStorageError):
                raise
            raise _storage_error(exc, "cannot write", tmp) from None
        finally:
            os.close(out)
        try:
            os.replace(tmp, dest)
        except OSError as exc:
            raise _storage_error(exc, f"cannot rename {tmp} to {dest.name}") from None
        return result

    # -- reads ---------------------------------------------------------------------------

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> io.RawIOBase:
        """A stream over `.log` bytes [start_position, end_position] (inclusive, Kafka's);
        end None: to the end of the file. Requires 0 <= start <= end < size (start == size
        is allowed with end None and gives an empty stream). ValueError for other positions,
        RemoteStorageError on a checksum mismatch."""
        fd, path = self._open_stored(metadata, LOG)
        try:
            size = self._checked_log_size(metadata, fd, path)
            end = size - 1 if end_position is None else end_position
            _check_range(start_position, end + 1, size, path, inclusive=end_position is not None)
            return _RangeStream(fd, path, start_position, end + 1)
        except BaseException:
            os.close(fd)
            raise

    def read_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                   end_exclusive: int) -> bytes:
        """`.log` bytes [start, end_exclusive) in one pread (GIL released). Requires
        0 <= start <= end_exclusive <= size: ValueError otherwise."""
        f = self._acquire_log(metadata)
        try:
            _check_range(start, end_exclusive, f.size, f.path, inclusive=False)
            return _pread_exact(f.fd, end_exclusive - start, start, f.path)
        finally:
            self._open_logs.release(f)

    def read_range_into(self, metadata: RemoteLogSegmentMetadata, start: int,
                        buffer) -> int:
        """Fills the writable `buffer` with `.log` bytes from `start` (preadv, GIL
        released); the range must lie inside the file. Returns the bytes read."""
        view = memoryview(buffer).cast("B")
        f = self._acquire_log(metadata)
        try:
            _check_range(start, start + len(view), f.size, f.path, inclusive=False)
            _preadv_exact(f.fd, view, start, f.path)
            return len(view)
        finally:
            view.release()
            self._open_logs.release(f)

    def map_range(self, metadata: RemoteLogSegmentMetadata, start: int,
                  end_exclusive: int) -> memoryview:
        """A read-only view of `.log` bytes [start, end_exclusive): no byte is copied. The
        segment's file is mapped once (while it stays in the open-file cache) and checked
        as `read_range` checks it. Sound because a stored `.log` never changes once renamed
        into place, and deleting it (unlink) leaves existing mappings readable: a view stays
        valid after eviction, `close()` and the segment's deletion. Requires
        0 <= start <= end_exclusive <= size: ValueError otherwise."""
        f = self._acquire_log(metadata)
        try:
            _check_range(start, end_exclusive, f.size, f.path, inclusive=False)
            if start == end_exclusive:
                return memoryview(b"")
            mapped = f.mapped
            if mapped is None:
                try:
                    mapped = mmap.mmap(f.fd, f.size, flags=mmap.MAP_SHARED,
                                       prot=mmap.PROT_READ)
                except OSError as exc:
                    raise RemoteStorageError(f"cannot map {f.path}: {exc.strerror or exc}",
                                             file=str(f.path)) from None
                mapped = self._open_logs.set_mapping(f, mapped)
            return memoryview(mapped)[start:end_exclusive]
        finally:
            self._open_logs.release(f)

    def map_range_if_open(self, metadata: RemoteLogSegmentMetadata, start: int,
                          end_exclusive: int) -> memoryview | None:
        """`map_range` when the segment's `.log` is already open, checked and mapped, else
        None: it never opens, checks or maps a file, so a reader may call it on a thread
        that must not wait on storage (the RLM serves such reads on the caller's thread).
        Page faults on the mapping remain: on a local tier they are page-cache reads, as
        for the local log; on a network mount they are network reads."""
        self._check_open()
        f = self._open_logs.acquire((metadata.remote_log_segment_id.id,
                                     metadata.custom_metadata))
        if f is None:
            return None
        try:
            if f.mapped is None:
                return None
            _check_range(start, end_exclusive, f.size, f.path, inclusive=False)
            if start == end_exclusive:
                return memoryview(b"")
            return memoryview(f.mapped)[start:end_exclusive]
        finally:
            self._open_logs.release(f)

    def _acquire_log(self, metadata: RemoteLogSegmentMetadata) -> _OpenLog:
        """The segment's open, checked `.log` (from the open-file cache when possible);
        the caller releases it."""
        self._check_open()
        key = (metadata.remote_log_segment_id.id, metadata.custom_metadata)
        f = self._open_logs.acquire(key)
        if f is not None:
            return f
        fd, path = self._open_stored(metadata, LOG)
        try:
            size = self._checked_log_size(metadata, fd, path)
        except BaseException:
            os.close(fd)
            raise
        return self._open_logs.insert(key, _OpenLog(fd, path, size))

    def fetch_index(self, metadata: RemoteLogSegmentMetadata,
                    index_type: IndexType) -> io.BytesIO:
        """The whole auxiliary file, size and CRC checked against the custom metadata.
        RemoteResourceNotFoundError for a transaction index that was not copied."""
        return io.BytesIO(self.fetch_index_bytes(metadata, index_type))

    def fetch_index_bytes(self, metadata: RemoteLogSegmentMetadata,
                          index_type: IndexType) -> bytes:
        """`fetch_index`'s bytes. A file the checksums say was stored but that is missing
        is a RemoteStorageError (damage), never RemoteResourceNotFoundError: readers take
        a transaction index that was not copied for one without aborted transactions."""
        suffix = _INDEX_SUFFIX[IndexType(index_type)]
        checksums = SegmentChecksums.of(metadata)
        if checksums is not None and suffix not in checksums.files:
            raise RemoteResourceNotFoundError(
                f"{metadata.remote_log_segment_id} has no {suffix} file: it was not copied",
                file=str(self.segment_path(metadata, suffix)))
        try:
            fd, path = self._open_stored(metadata, suffix)
        except RemoteResourceNotFoundError as exc:
            if checksums is None:
                raise
            raise RemoteStorageError(f"{exc}: its checksum record says it was stored "
                                     "(deleted or lost)", file=exc.file) from None
        try:
            size = _fstat(fd, path).st_size
            data = _pread_exact(fd, size, 0, path)
        finally:
            os.close(fd)
        if checksums is not None:
            _verify(checksums.files[suffix], size, crc32c(data), path)
        return data

    def _checked_log_size(self, metadata: RemoteLogSegmentMetadata, fd: int,
                          path: Path) -> int:
        """The `.log` size, after the checks the module docstring describes."""
        st = _fstat(fd, path)
        checksums = SegmentChecksums.of(metadata)
        if checksums is None:
            return st.st_size
        expected = checksums.files.get(LOG)
        if expected is None:
            raise RemoteStorageError(f"custom metadata of {metadata.remote_log_segment_id} "
                                     f"has no checksum for {path.name}", file=str(path))
        if st.st_size != expected[1]:
            _verify(expected, st.st_size, None, path)
        if self._verification == "full":
            self._verify_log_once(metadata, fd, st, expected, path)
        return st.st_size

    def _verify_log_once(self, metadata, fd, st, expected, path) -> None:
        key = (metadata.remote_log_segment_id.id, st.st_ino, st.st_size, st.st_mtime_ns)
        if self._is_verified(key):
            return
        with self._verify_locks[hash(key) % _VERIFY_LOCK_STRIPES]:
            if self._is_verified(key):  # another thread checked it while we waited
                return
            _verify(expected, st.st_size, _crc_of_fd(fd, st.st_size, path), path)
            with self._verified_lock:
                self._verified[key] = True
                while len(self._verified) > _VERIFY_CACHE_SIZE:
                    self._verified.popitem(last=False)

    def _is_verified(self, key) -> bool:
        with self._verified_lock:
            if key in self._verified:
                self._verified.move_to_end(key)
                return True
        return False

    # -- delete --------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Removes the segment's files (and leftover `.tmp` files) from every dir, then the
        partition directory if that left it empty. Idempotent."""
        self._check_open()
        self._open_logs.discard(metadata.remote_log_segment_id.id)
        self._remove_segment_files(metadata, self._ranked_roots(metadata.topic_id_partition),
                                   missing_ok=True, quiet=False)

    def _remove_segment_files(self, metadata, roots, *, missing_ok: bool, quiet: bool) -> None:
        pdir_name = self.partition_dir_name(metadata.topic_id_partition)
        first_error = None
        for root in roots:
            pdir = root / pdir_name
            for suffix in FILE_SUFFIXES:  # the .log first: without it the set is incomplete
                name = self.segment_file_name(metadata, suffix)
                for path in (pdir / name, pdir / (name + _TMP)):
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        first_error = first_error or _storage_error(exc,
                                                                    f"cannot delete {path}")
            with contextlib.suppress(OSError):  # not empty, or gone: either is fine
                pdir.rmdir()
        if first_error is not None and not quiet:
            raise first_error

    def close(self) -> None:
        self._closed = True
        self._open_logs.clear()

    def __reduce__(self):
        # Spark ships the manager to executors: rebuild it there from its settings (the
        # verification cache and locks are per process)
        return (_rebuild, (type(self), [str(d) for d in self.dirs], self._fsync,
                           self._verification, self.broker_id))

    def __repr__(self):
        return f"FileSystemRemoteStorageManager(dirs={[str(d) for d in self.dirs]})"


def _rebuild(cls, dirs, fsync, verification, broker_id):
    return cls(dirs or None, fsync=fsync, log_read_verification=verification,
               broker_id=broker_id)


# ---- file helpers ------------------------------------------------------------------------

class _RangeStream(io.RawIOBase):
    """A read-only stream over [pos, end) of an open fd, read with pread (GIL released)."""

    def __init__(self, fd: int, path: Path, pos: int, end: int):
        super().__init__()
        self._fd, self._path, self._pos, self._end = fd, path, pos, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._checkClosed()
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._end - self._pos)
        if n <= 0:
            return 0
        _preadv_exact(self._fd, view[:n], self._pos, self._path)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        remaining = self._end - self._pos
        n = remaining if size is None or size < 0 else min(size, remaining)
        if n <= 0:
            return b""
        data = _pread_exact(self._fd, n, self._pos, self._path)
        self._pos += n
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _storage_error(exc: OSError, what: str, path: Path | None = None) -> RemoteStorageError:
    """`exc` as a RemoteStorageError naming the errno (ENOSPC, EROFS, ...) and the file;
    its `errno` is kept, so callers can tell a full tier from a damaged one."""
    if path is None and exc.filename is not None:
        path = exc.filename
    cls = RemoteResourceNotFoundError if isinstance(exc, FileNotFoundError) else RemoteStorageError
    name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    reason = exc.strerror or str(exc)
    error = cls(f"{what}: {name} ({reason})" if name else f"{what}: {reason}",
                file=None if path is None else str(path))
    error.errno, error.strerror = exc.errno, exc.strerror
    return error


def _in_copy_of(exc: RemoteStorageError, metadata: RemoteLogSegmentMetadata
                ) -> RemoteStorageError:
    """`exc` naming the partition and segment whose copy it stopped."""
    error = type(exc)(f"copy of segment {metadata.remote_log_segment_id.id} of partition "
                      f"{metadata.topic_id_partition}: {exc.reason}", file=exc.file,
                      position=exc.position, offset=exc.offset)
    error.errno, error.strerror = exc.errno, exc.strerror
    return error


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _storage_error(exc, f"cannot delete {path}") from None


def _fstat(fd: int, path: Path) -> os.stat_result:
    try:
        return os.fstat(fd)
    except OSError as exc:
        raise _storage_error(exc, f"cannot stat {path}") from None


def _check_range(start: int, end_exclusive: int, size: int, path: Path, *,
                 inclusive: bool) -> None:
    if start < 0 or end_exclusive < start or end_exclusive > size or (
            inclusive and end_exclusive == start):
        shown = (f"[{start}, {end_exclusive - 1}] (inclusive)" if inclusive
                 else f"[{start}, {end_exclusive})")
        raise ValueError(f"byte range {shown} outside {path} of {size} bytes: need "
                         f"0 <= start <= end {'< ' if inclusive else '<= '}size")


def _verify(expected: tuple[int, int], size: int, crc: int | None, path: Path) -> None:
    want_crc, want_size = expected
    if size != want_size:
        raise RemoteStorageError(f"remote file {path} has {size} bytes, its checksum record "
                                 f"says {want_size}: truncated or replaced", file=str(path))
    if crc is not None and crc != want_crc:
        raise RemoteStorageError(f"CRC32C mismatch in remote file {path}: stored "
                                 f"0x{want_crc:08x}, computed 0x{crc:08x}", file=str(path))


def _pread_exact(fd: int, n: int, offset: int, path: Path) -> bytes:
    try:
        data = os.pread(fd, n, offset)
        if len(data) == n:
            return data
        parts = [data]
        got = len(data)
        while got < n:  # short reads happen on network filesystems
            chunk = os.pread(fd, n - got, offset + got)
            if not chunk:
                raise RemoteStorageError(f"remote file {path} ended at byte {offset + got}, "
                                         f"expected {offset + n}", file=str(path))
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
    except RemoteStorageError:
        raise
    except OSError as exc:
        raise _storage_error(exc, f"cannot read {path} at byte {offset}") from None


def _preadv_exact(fd: int, view: memoryview, offset: int, path: Path) -> None:
    done = 0
    try:
        while done < len(view):
            n = os.preadv(fd, [view[done:]], offset + done)
            if n == 0:
                raise RemoteStorageError(f"remote file {path} ended at byte {offset + done}, "
                                         f"expected {offset + len(view)}", file=str(path))
            done += n
    except RemoteStorageError:
        raise
    except OSError as exc:
        raise _storage_error(exc, f"cannot read {path} at byte {offset + done}") from None


def _crc_of_fd(fd: int, size: int, path: Path) -> int:
    if size == 0:
        return crc32c(b"")
    try:
        with mmap.mmap(fd, size, flags=_MAP_FLAGS, prot=mmap.PROT_READ) as mapped:
            return crc32c(mapped)
    except OSError as exc:
        raise _storage_error(exc, f"cannot read {path} to check its CRC32C") from None


def _write_all(fd: int, view: memoryview, path: Path) -> None:
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _pwrite_all(fd: int, view: memoryview, start: int, end: int) -> None:
    """Writes view[start:end] at file position `start`."""
    while start < end:
        start += os.pwrite(fd, view[start:end], start)


def _copy_file(source: Path, out: int, dest: Path) -> tuple[int, int]:
    """Copies `source` into fd `out` in the kernel (copy_file_range), CRC'ing each slice
    right after it is copied; falls back to a read/CRC/write loop where the kernel copy is
    unsupported. Returns (crc32c, size)."""
    try:
        src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RemoteStorageError(f"source file {source} does not exist",
                                 file=str(source)) from None
    except OSError as exc:
        raise _storage_error(exc, "cannot open source file", source) from None
    try:
        size = os.fstat(src).st_size
        if size == 0:
            return crc32c(b""), 0
        failure = None
        with mmap.mmap(src, size, flags=_MAP_FLAGS, prot=mmap.PROT_READ) as mapped, \
                memoryview(mapped) as view:
            try:
                crc = _copy_mapped(src, out, view, source)
            except OSError as exc:
                # a traceback keeps its frames' locals alive, slices of `view` among them:
                # the mapping would stay exported and closing it raise BufferError in place
                # of this error (ENOSPC on a full tier). Dropped here, raised after the close.
                failure = exc.with_traceback(None)
        if failure is not None:
            raise failure
        return crc, size
    finally:
        os.close(src)


def _copy_mapped(src: int, out: int, view: memoryview, source: Path) -> int:
    """The copy loop of _copy_file over the mapped source; its CRC32C."""
    size = len(view)
    crc, done = 0, 0
    kernel_copy = hasattr(os, "copy_file_range")
    while done < size:
        n = min(_COPY_SLICE, size - done)
        if kernel_copy:
            try:
                n = os.copy_file_range(src, out, n, done, done)
            except OSError as exc:
                if exc.errno not in _NO_COPY_FILE_RANGE:
                    raise
                kernel_copy = False
                continue
            if n == 0:
                raise RemoteStorageError(
                    f"source file {source} shrank during the copy: {done} of {size} bytes",
                    file=str(source))
        else:
            _pwrite_all(out, view, done, done + n)
        crc = crc32c(view[done:done + n], crc)
        done += n
    return crc
