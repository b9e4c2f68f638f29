"""The copy path of the filesystem tier: crash-safe, idempotent stores of a segment's files.

Each file is written to `<name>.tmp` (truncated first, so a retry overwrites whatever a failed
attempt left), fsynced, renamed into place, and the partition directory is fsynced; the
`.log` is renamed last, after a directory fsync, so a `.log` in place means the whole set
is. A failed copy removes what it wrote. Files are copied in the kernel (copy_file_range)
and CRC'd slice by slice while their pages are still hot, for the checksum record.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Callable
from pathlib import Path

from engine.checksums import crc32c
from engine.common import fsync_dir
from engine.errors import RemoteStorageError
from engine.remote.filesystem.files import _MAP_FLAGS, _in_copy_of, _storage_error, _unlink
from engine.remote.filesystem.layout import (
    _TMP,
    LEADER_EPOCH,
    LOG,
    OFFSET_INDEX,
    SNAPSHOT,
    TIME_INDEX,
    TXN_INDEX,
    SegmentChecksums,
)
from engine.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from engine.remote.storage import LogSegmentData

__all__ = ["FileSystemCopy"]

# copy_file_range in slices this size, each CRC'd right after from the still-cache-hot source
# pages: 0.9x a plain kernel copy on one core, where copy-then-CRC was 0.77x (bench/).
_COPY_SLICE = 256 << 10
_NO_COPY_FILE_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP,
                       getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


class FileSystemCopy:
    """`copy_log_segment_data`; mixed into `FileSystemRemoteStorageManager`."""

    # provided by FileSystemLayout and FileSystemRemoteStorageManager
    _fsync: bool
    _check_open: Callable[[], None]
    partition_dir: Callable[[TopicIdPartition], Path]
    segment_file_name: Callable[[RemoteLogSegmentMetadata, str], str]
    _remove_segment_files: Callable[..., None]

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
