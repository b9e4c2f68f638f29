"""What the object-store tier uploads, read from the broker's segment files: the `.log`'s
size (positions in the format are int32), a small file read whole (an index, a snapshot),
and the `.log`'s chunks transformed ahead of the upload on a pool. OS errors become
RemoteStorageErrors naming the errno and the file."""

from __future__ import annotations

import collections
import concurrent.futures
import os
from collections.abc import Iterator

from engine.errors import RemoteStorageError
from engine.remote.objectstore.transforms import ChunkTransform

__all__ = ["file_size", "read_source", "storage_error", "transformed_chunks"]

INT32_MAX = 2**31 - 1


def file_size(path) -> int:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise storage_error(exc, f"cannot stat segment {path}") from None
    if size > INT32_MAX:
        raise RemoteStorageError(f"segment {path} is {size} bytes: the format's positions "
                                 "are int32", file=str(path))
    return size


def read_source(source) -> bytes:
    if source is None:
        return b""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as exc:
        raise storage_error(exc, f"cannot read {source}") from None


def transformed_chunks(path, file_size: int, chunk_size: int, transform: ChunkTransform,
                        sizes: list[int], pool: concurrent.futures.Executor, ahead: int
                       ) -> Iterator[bytes]:
    """The `.log`'s chunks, transformed, in order; records each transformed size. Up to
    `ahead` chunks are read and transformed ahead of the upload on `pool` (zstd
    and AES-GCM run without the GIL), so memory stays at a few chunks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise storage_error(exc, f"cannot open segment {path}") from None
    pending: collections.deque = collections.deque()
    try:
        pos = 0
        while pos < file_size or pending:
            while pos < file_size and len(pending) < ahead:
                n = min(chunk_size, file_size - pos)
                data = os.pread(fd, n, pos)
                if len(data) != n:
                    raise RemoteStorageError(f"segment {path} ended at byte "
                                             f"{pos + len(data)}, before its size {file_size}",
                                             file=str(path))
                pending.append(pool.submit(transform.transform, data))
                pos += n
            stored = pending.popleft().result()
            sizes.append(len(stored))
            yield stored
    except RemoteStorageError:
        raise
    except OSError as exc:
        raise storage_error(exc, f"cannot read segment {path}") from None
    finally:
        for fut in pending:
            fut.cancel()
        os.close(fd)


def storage_error(exc: BaseException, what: str) -> RemoteStorageError:
    if isinstance(exc, OSError) and exc.errno is not None:
        err = RemoteStorageError(f"{what}: [Errno {exc.errno}] {exc.strerror}",
                                 file=getattr(exc, "filename", None))
        err.errno, err.strerror = exc.errno, exc.strerror
        return err
    return RemoteStorageError(f"{what}: {type(exc).__name__}: {exc}")
