"""OS-level file helpers of the filesystem tier: errors that name the errno and the file,
exact positional reads (network filesystems return short reads), range checks and the
checksum comparison, shared by the copy and read paths.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import numpy as np

from engine._native import records as _records
from engine.checksums import crc32c
from engine.errors import KafkaEngineError, RemoteResourceNotFoundError, RemoteStorageError
from engine.remote.metadata import RemoteLogSegmentMetadata

# Map sources with every page at once: faulting 4 KiB pages one by one cost 0.6x a raw copy
# with 4 copier threads on 2 cores, populated mappings 1.3x (bench/compare_remote_copy.py).
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


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


def _verify_log_fd(fd: int, size: int, expected: tuple[int, int], path: Path,
                   keep: bool = False) -> mmap.mmap | None:
    """Checks the `.log`'s CRC32C against `expected`, then the CRC of each record batch
    it frames (RemoteStorageError naming the byte and offset of the first bad one). With
    `keep`, returns the read-only, populated mapping the checks read (a reader serves from
    it: no second mapping, no page faulted in again); else it is closed (None)."""
    if size == 0:
        _verify(expected, size, crc32c(b""), path)
        return None
    try:
        mapped = mmap.mmap(fd, size, flags=_MAP_FLAGS, prot=mmap.PROT_READ)
        try:
            _verify(expected, size, crc32c(mapped), path)
            _check_batch_crcs(mapped, path)
        except BaseException:
            mapped.close()
            raise
    except RemoteStorageError:
        raise
    except OSError as exc:
        raise _storage_error(exc, f"cannot read {path} to check its CRC32C") from None
    if keep:
        return mapped
    mapped.close()
    return None


def _check_batch_crcs(data, path: Path) -> None:
    try:
        headers, _ = _records.scan(data, True)
    except KafkaEngineError as exc:
        raise RemoteStorageError(f"{path}: no record batch frames at byte {exc.position}: "
                                 f"{exc.reason}", file=str(path),
                                 position=exc.position) from None
    bad = np.flatnonzero(~headers["crc_valid"])
    if len(bad):
        row = headers[bad[0]]
        raise RemoteStorageError(
            f"{path}: CRC mismatch in the record batch at byte {int(row['position'])} "
            f"(offsets {int(row['base_offset'])}-{int(row['last_offset'])})",
            file=str(path), position=int(row["position"]), offset=int(row["base_offset"]))
