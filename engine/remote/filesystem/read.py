"""The read paths of the filesystem tier: ranged and zero-copy `.log` reads, index fetches,
and the checks every read makes against the checksum record.

`fetch_index` reads the whole file and checks its size and CRC every time; `.log` reads
check the file size whenever they open the file and, with `log.read.verification=full` (the
default), the CRC of the whole `.log` on the first read of the segment in this process; the
verdict is cached per segment id and (inode, size, mtime). The `.log` files of the 128 most
recently read segments stay open (`_OpenLogCache`, reference-counted, so eviction never
closes a file under a read; deleting a segment drops its file), so a ranged read is one
pread, and `map_range` views a mapping of the open file: the one the CRC check read when
the file was opened for `map_range` (one mapping a segment, its pages mapped once).
"""

from __future__ import annotations

import io
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

from engine.checksums import crc32c
from engine.errors import RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.filesystem.files import (
    _check_range,
    _fstat,
    _pread_exact,
    _preadv_exact,
    _verify,
    _verify_log_fd,
)
from engine.remote.filesystem.layout import _INDEX_SUFFIX, LOG, SegmentChecksums
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.storage import IndexType

__all__ = ["FileSystemReads"]

_VERIFY_CACHE_SIZE = 8192
_OPEN_LOG_CACHE_SIZE = 128
_VERIFY_LOCK_STRIPES = 64


# ---- open .log files ---------------------------------------------------------------------

class _OpenLog:
    """An open, checked `.log`. `refs` counts the cache's hold plus each read in progress;
    the fd is closed when it drops to 0, so eviction never closes it under a reader.
    `mapped` is its read-only mapping once `map_range` made one: it is never closed
    explicitly, only dropped, so views handed out keep it mapped (their buffer export holds
    the mmap object) and it is unmapped when the last of them goes."""

    __slots__ = ("fd", "mapped", "path", "refs", "size")

    def __init__(self, fd: int, path: Path, size: int, mapped: mmap.mmap | None = None):
        self.fd, self.path, self.size, self.refs = fd, path, size, 1
        self.mapped = mapped


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


# ---- reads -------------------------------------------------------------------------------

class FileSystemReads:
    """The read methods; mixed into `FileSystemRemoteStorageManager`, whose constructor
    creates the caches below."""

    # provided by FileSystemLayout
    _check_open: Callable[[], None]
    _open_stored: Callable[[RemoteLogSegmentMetadata, str], tuple[int, Path]]
    segment_path: Callable[[RemoteLogSegmentMetadata, str], Path]
    _verification: str
    _verified: OrderedDict
    _verified_lock: threading.Lock
    _verify_locks: list[threading.Lock]
    _open_logs: _OpenLogCache

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
        f = self._acquire_log(metadata, keep_mapping=True)
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

    def _acquire_log(self, metadata: RemoteLogSegmentMetadata,
                     keep_mapping: bool = False) -> _OpenLog:
        """The segment's open, checked `.log` (from the open-file cache when possible);
        the caller releases it. With `keep_mapping` (a caller that maps the file), a file
        opened now keeps the mapping its CRC check read as its mapping, if one ran."""
        self._check_open()
        key = (metadata.remote_log_segment_id.id, metadata.custom_metadata)
        f = self._open_logs.acquire(key)
        if f is not None:
            return f
        fd, path = self._open_stored(metadata, LOG)
        try:
            size, mapped = self._checked_log(metadata, fd, path, keep_mapping)
        except BaseException:
            os.close(fd)
            raise
        # the check's mapping, if it made one: no second mapping, no page faulted in again
        return self._open_logs.insert(key, _OpenLog(fd, path, size, mapped))

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

    def verifies_batch_crcs(self, metadata: RemoteLogSegmentMetadata) -> bool:
        # with `full`, a `.log` with checksums is served only after _verify_log_once
        return self._verification == "full" and metadata.custom_metadata is not None

    def read_generation(self, metadata: RemoteLogSegmentMetadata) -> Hashable | None:
        """The identity of the segment's open `.log`, which every range is read from:
        (device, inode, size, mtime, ctime) of the open file, so a file replaced, or
        rewritten in place, has another. None while the file is not open (no range
        read yet, or evicted: the next read may open another file)."""
        f = self._open_logs.acquire((metadata.remote_log_segment_id.id,
                                     metadata.custom_metadata))
        if f is None:
            return None
        try:
            st = _fstat(f.fd, f.path)
        finally:
            self._open_logs.release(f)
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def _checked_log_size(self, metadata: RemoteLogSegmentMetadata, fd: int,
                          path: Path) -> int:
        """The `.log` size, after the checks the module docstring describes."""
        return self._checked_log(metadata, fd, path)[0]

    def _checked_log(self, metadata: RemoteLogSegmentMetadata, fd: int, path: Path,
                     keep_mapping: bool = False) -> tuple[int, mmap.mmap | None]:
        """(the `.log` size, after the checks the module docstring describes; with
        `keep_mapping`, the mapping the CRC check read when it ran now, else None)."""
        st = _fstat(fd, path)
        checksums = SegmentChecksums.of(metadata)
        if checksums is None:
            return st.st_size, None
        expected = checksums.files.get(LOG)
        if expected is None:
            raise RemoteStorageError(f"custom metadata of {metadata.remote_log_segment_id} "
                                     f"has no checksum for {path.name}", file=str(path))
        if st.st_size != expected[1]:
            _verify(expected, st.st_size, None, path)
        if self._verification == "full":
            return st.st_size, self._verify_log_once(metadata, fd, st, expected, path,
                                                     keep_mapping)
        return st.st_size, None

    def _verify_log_once(self, metadata, fd, st, expected, path,
                         keep_mapping: bool = False) -> mmap.mmap | None:
        """Checks the `.log` unless this process checked this file already; with
        `keep_mapping`, the mapping a check made now (else None)."""
        key = (metadata.remote_log_segment_id.id, st.st_ino, st.st_size, st.st_mtime_ns)
        if self._is_verified(key):
            return None
        with self._verify_locks[hash(key) % _VERIFY_LOCK_STRIPES]:
            if self._is_verified(key):  # another thread checked it while we waited
                return None
            mapped = _verify_log_fd(fd, st.st_size, expected, path, keep=keep_mapping)
            with self._verified_lock:
                self._verified[key] = True
                while len(self._verified) > _VERIFY_CACHE_SIZE:
                    self._verified.popitem(last=False)
            return mapped

    def _is_verified(self, key) -> bool:
        with self._verified_lock:
            if key in self._verified:
                self._verified.move_to_end(key)
                return True
        return False
