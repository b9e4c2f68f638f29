"""File handling shared by the offset and time indexes (Kafka's `AbstractIndex`).

An index file is a memory-mapped array of fixed-size entries with no header. Kafka's rules:

- A file **created** for a new segment is preallocated to `max_index_size` rounded down to a
  multiple of the entry size; its entry count starts at 0.
- An **existing** file is opened with `entries = size // entry_size`: files on disk are
  assumed trimmed (`trim_to_valid_size`, done on roll, close and after recovery).
- `max_entries` is the mapped size // entry size; `resize` changes it (the active segment's
  indexes are resized back to `max_index_size` when loaded).

The searches come from the native cores in `engine._native.index` (the second base class of
`OffsetIndex` / `TimeIndex`); this mixin owns the file, the mapping and the lock.

Thread-safety: lookups may run from any number of threads, concurrently with appends.
Mutations (append, truncate, resize, close, rename) serialize on an internal lock, and those
that drop mapped memory wait for in-flight lookups to finish first.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

__all__ = ["DEFAULT_MAX_INDEX_SIZE", "INT32_MAX", "AbstractIndex"]

#: Kafka's `segment.index.bytes` / `log.index.size.max.bytes` default, in bytes.
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
INT32_MAX = 2**31 - 1
_EMPTY = b""
_BUSY_WAIT_S = 0.0001


if TYPE_CHECKING:
    from engine._native.index import _IndexCore

    class _NativeCore(_IndexCore):
        """What the native cores under every index provide (engine._native.index)."""

        def _count_below(self, offset: int) -> int: ...
else:
    _NativeCore = object


class AbstractIndex(_NativeCore):
    """Mixin of `OffsetIndex` and `TimeIndex`: mapping, sizing, truncation, lifecycle.

    Subclasses define `ENTRY_SIZE`, `KIND` (a word for messages) and `sanity_check()`, and
    inherit from a native core that provides `_bind`, `_unbind`, `_set_entries`, `entries`,
    `base_offset` and the searches.
    """

    ENTRY_SIZE = 0
    KIND = "index"

    def __init__(self, file, base_offset: int, max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
                 writable: bool = True):
        """Opens `file`, creating and preallocating it if it does not exist and `writable`.

        Args:
            file: path of the index file.
            base_offset: the segment's base offset (>= 0).
            max_index_size: bytes to preallocate on creation (rounded down to the entry size).
            writable: map read-write (appends, resizes) or read-only (file must exist).

        Raises:
            ValueError: negative base offset, or max_index_size below one entry on creation.
            FileNotFoundError: a read-only index whose file does not exist.
        """
        if base_offset < 0:
            raise ValueError(f"base offset must be >= 0, got {base_offset}")
        self._file = Path(file)
        self._max_index_size = int(max_index_size)
        self._writable = bool(writable)
        self._lock = threading.RLock()
        self._mmap: mmap.mmap | None = None
        self._buffer = None
        self._length = 0
        self._closed = False
        self._open(int(base_offset))

    @classmethod
    def from_buffer(cls, buffer, base_offset: int):
        """A read-only index over an in-memory buffer (bytes, bytearray, memoryview, numpy)
        holding whole entries, e.g. an index fetched from remote storage. No file is involved:
        `file` is None, and resize/append/rename raise io.UnsupportedOperation."""
        self = cls.__new__(cls)
        self._file = None
        self._max_index_size = 0
        self._writable = False
        self._lock = threading.RLock()
        self._mmap = None
        self._closed = False
        self._length = memoryview(buffer).nbytes
        self._attach(buffer, int(base_offset), self._length // cls.ENTRY_SIZE)
        return self

    # -- opening and mapping -------------------------------------------------------------

    def _open(self, base_offset: int) -> None:
        path = self._file
        newly_created = False
        if self._writable:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o644)
                newly_created = True
            except FileExistsError:
                fd = os.open(path, os.O_RDWR | _O_BINARY)
        else:
            fd = os.open(path, os.O_RDONLY | _O_BINARY)
        try:
            if newly_created:
                size = self._round_down(self._max_index_size)
                if size < self.ENTRY_SIZE:
                    os.close(fd)
                    fd = -1
                    os.unlink(path)
                    raise ValueError(f"invalid max index size {self._max_index_size} for "
                                     f"{path}: below one {self.ENTRY_SIZE}-byte entry")
                os.ftruncate(fd, size)
            self._length = os.fstat(fd).st_size
            buffer = self._map(fd, self._length)
        finally:
            if fd >= 0:
                os.close(fd)
        entries = 0 if newly_created else self._length // self.ENTRY_SIZE
        self._attach(buffer, base_offset, entries)

    def _map(self, fd: int, length: int):
        if length == 0:
            self._mmap = None
            return _EMPTY  # mmap refuses empty files; an empty buffer holds no entries
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        self._mmap = mmap.mmap(fd, length, access=access)
        return self._mmap

    def _attach(self, buffer, base_offset: int, entries: int) -> None:
        """Points the native core's searches at `buffer` and keeps it for raw reads."""
        self._bind(buffer, base_offset, entries)
        self._buffer = buffer
        if buffer is self._mmap and self._writable and _MADV_RANDOM is not None:
            # Past its entries an active index is a preallocated hole that appends fill a
            # page at a time; the first touch of each page would otherwise read ahead (zero-
            # fill) a whole window of the hole, which cost appends of ~60 KB batches about
            # 1.5 us each. The entries keep the default read-ahead.
            length = len(buffer)
            start = -(-entries * self.ENTRY_SIZE // mmap.PAGESIZE) * mmap.PAGESIZE
            if start < length:
                buffer.madvise(_MADV_RANDOM, start, length - start)

    def _detach(self) -> None:
        """Unbinds the native core (after in-flight searches end) and unmaps."""
        with self._exclusive():
            self._unbind()
            self._buffer = None
            if self._mmap is not None:
                self._mmap.close()
                self._mmap = None

    @contextlib.contextmanager
    def _exclusive(self):
        """No search overlaps the body: new searches keep the GIL (the native core's draining
        mode) and the ones running without it are waited for (they end in microseconds).
        Searches never block, and a mutation cannot starve under a stream of searches."""
        self._drain(1)
        try:
            while not self._idle():
                time.sleep(_BUSY_WAIT_S)
            yield
        finally:
            self._drain(-1)

    def _round_down(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _require_writable(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"{what} on closed {self.KIND} {self._file}")
        if not self._writable or self._file is None:
            raise io.UnsupportedOperation(f"{what} on read-only {self.KIND} {self._file}")

    # -- properties ----------------------------------------------------------------------

    @property
    def file(self) -> Path | None:
        """Path of the index file (None for `from_buffer` indexes)."""
        return self._file

    @property
    def max_index_size(self) -> int:
        """Bytes preallocated on creation and restored by `reset` (Kafka's maxIndexSize)."""
        return self._max_index_size

    @property
    def max_entries(self) -> int:
        """Entries the current mapping can hold (mapped size // entry size)."""
        return self._bound_capacity

    @property
    def length(self) -> int:
        """Size of the mapped file in bytes (not necessarily entries * entry size)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes of valid entries: entries * entry size."""
        return self.entries * self.ENTRY_SIZE

    @property
    def writable(self) -> bool:
        return self._writable

    def is_full(self) -> bool:
        """True when no slot is free (the time index overrides: it keeps one in reserve)."""
        return self.entries >= self._bound_capacity

    def can_append_offset(self, offset: int) -> bool:
        """Whether offset - base_offset fits the int32 relative-offset field."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _relative_offset(self, offset: int, error) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise error(f"offset {offset} does not fit a relative offset of {self.KIND} "
                        f"{self._file}: offset - base offset {self.base_offset} = {relative}, "
                        f"allowed [0, {INT32_MAX}]", file=self._file, offset=offset)
        return relative

    # -- sizing --------------------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Sets the file and mapping to `new_size` rounded down to the entry size.

        Returns False if the size is already that. Raises ValueError if the new size cannot
        hold the current entries, io.UnsupportedOperation on a read-only index.
        """
        with self._lock:
            rounded = self._round_down(int(new_size))
            if rounded == self._length:
                return False
            self._require_writable("resize")
            entries = self.entries
            if rounded < entries * self.ENTRY_SIZE:
                raise ValueError(f"cannot resize {self.KIND} {self._file} to {rounded} bytes: "
                                 f"it holds {entries} entries ({entries * self.ENTRY_SIZE} bytes)")
            with self._exclusive():
                # Searches read only valid entries, which fit the new size, so the old mapping
                # stays usable until the new one replaces it.
                old = self._mmap
                fd = os.open(self._file, os.O_RDWR | _O_BINARY)
                try:
                    os.ftruncate(fd, rounded)
                    buffer = self._map(fd, rounded)
                finally:
                    os.close(fd)
                self._attach(buffer, self.base_offset, entries)
                self._length = rounded
                if old is not None:
                    old.close()
            return True

    def trim_to_valid_size(self) -> None:
        """Shrinks the file to entries * entry size (done on roll, close and recovery)."""
        with self._lock:
            self.resize(self.entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drops every entry and preallocates `max_index_size` again."""
        with self._lock:
            self.truncate()
            self.resize(self._max_index_size)

    # -- truncation ----------------------------------------------------------------------

    def truncate(self) -> None:
        """Drops every entry (the file size is unchanged)."""
        self._truncate_to_entries(0)

    def truncate_to(self, offset: int) -> None:
        """Drops every entry whose offset >= `offset` (Kafka's truncateTo)."""
        with self._lock:
            self._truncate_to_entries(self._count_below(int(offset)))

    def _truncate_to_entries(self, entries: int) -> None:
        with self._lock:
            if entries < self.entries:
                with self._exclusive():
                    self._set_entries(entries)

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """Writes dirty mapped pages to the file (msync)."""
        with self._lock:
            if self._mmap is not None and self._writable:
                self._mmap.flush()

    def close(self) -> None:
        """Trims the file to its entries (writable indexes) and unmaps. Idempotent."""
        with self._lock:
            if self._closed:
                return
            if self._writable and self._file is not None:
                self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Unmaps without trimming (e.g. after a disk failure). Idempotent."""
        with self._lock:
            self._detach()
            self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmaps and deletes the file; returns whether it existed."""
        with self._lock:
            self.close_handler()
            if self._file is None:
                return False
            try:
                os.unlink(self._file)
                return True
            except FileNotFoundError:
                return False

    def rename_to(self, file) -> None:
        """Renames the file atomically (the mapping stays valid) and remembers the new path."""
        with self._lock:
            if self._file is None:
                raise io.UnsupportedOperation(f"rename of a {self.KIND} that has no file")
            os.replace(self._file, file)
            self._file = Path(file)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"{type(self).__name__}(file={str(self._file)!r}, base_offset={self.base_offset}, "
                f"entries={self.entries}, max_entries={self.max_entries})")

    def _raw_entries(self, file_dtype) -> np.ndarray:
        """A copy of the valid entries as stored (big-endian structured array)."""
        if self._buffer is None:
            raise ValueError(f"{self.KIND} {self._file} is closed")
        return np.frombuffer(self._buffer, dtype=file_dtype, count=self.entries).copy()


_O_BINARY = getattr(os, "O_BINARY", 0)
_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", None)
