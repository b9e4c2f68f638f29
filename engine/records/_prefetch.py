"""Decompression ahead of record creation, on a shared pool of threads.

Codec libraries release the GIL, so while the caller's thread turns one batch into Record
objects, other cores decompress the next ones. Work is grouped (several batches a task) so a
task's overhead stays small next to its decompression, and at most `ahead` groups are in
flight, which bounds memory.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

_GROUP_BYTES = 512 * 1024
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def workers() -> int:
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="engine-decompress")
        return _pool


def worth_it(batches: list) -> bool:
    """True when there is enough compressed data for the pool to pay off."""
    compressed = sum(b.size_in_bytes for b in batches if b.compression_type != 0)
    return (os.cpu_count() or 1) > 1 and compressed >= 2 * _GROUP_BYTES


def _decompress_group(group: list, verify_crc: bool) -> list:
    out = []
    for batch in group:
        if verify_crc:
            batch.ensure_valid()
        out.append(batch.records_section() if batch.compression_type != 0 else None)
    return out


def sections_ahead(batches: list, ahead: int, verify_crc: bool) -> Iterator:
    """Yields each batch's decompressed section (None when uncompressed), in order. An error
    in a group is raised when its batch is reached, never earlier."""
    groups, current, size = [], [], 0
    for batch in batches:
        current.append(batch)
        size += batch.size_in_bytes
        if size >= _GROUP_BYTES:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    pool = _executor()
    pending: deque = deque()
    it = iter(groups)
    try:
        for group in it:
            pending.append(pool.submit(_decompress_group, group, verify_crc))
            if len(pending) >= ahead:
                break
        while pending:
            done = pending.popleft()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(_decompress_group, nxt, verify_crc))
            yield from done.result()
    finally:
        for future in pending:
            future.cancel()
