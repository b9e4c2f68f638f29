"""Decoding on a shared pool of threads: decompression ahead of record creation, and
column chunks decoded in parallel.

Codec libraries release the GIL, so while the caller's thread turns one batch into Record
objects, other cores decompress the next ones. Work is grouped (several batches a task) so a
task's overhead stays small next to its decompression, and at most `ahead` groups are in
flight, which bounds memory.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor

_GROUP_BYTES = 512 * 1024
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


_sized_pools: dict[int, ThreadPoolExecutor] = {}


def executor(threads: int | None = None) -> ThreadPoolExecutor:
    """The shared pool (None), or a shared pool of exactly `threads` threads."""
    global _pool
    with _lock:
        if threads is not None:
            if threads not in _sized_pools:
                _sized_pools[threads] = ThreadPoolExecutor(
                    max_workers=threads, thread_name_prefix=f"engine-decode{threads}")
            return _sized_pools[threads]
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2),
                                       thread_name_prefix="engine-decode")
        return _pool


def _decompress_group(group: list, verify_crc: bool) -> list:
    """Sections of a group's batches; a failure is returned in the failing batch's place
    (and ends the group) so the caller raises it when it gets there."""
    out = []
    for batch in group:
        try:
            if verify_crc:
                batch.ensure_valid()
            out.append(batch.records_section() if batch.compression_type != 0 else None)
        except Exception as exc:  # noqa: BLE001 - re-raised in order by MemoryRecords.records
            out.append(exc)
            break
    return out


def sections_ahead(batches: list, ahead: int, verify_crc: bool) -> Generator:
    """Yields each batch's decompressed section (None when uncompressed), in order; a batch
    that failed yields its exception instead, for the caller to raise in its turn."""
    groups, current, size = [], [], 0
    for batch in batches:
        current.append(batch)
        size += batch.size_in_bytes
        if size >= _GROUP_BYTES:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    pool = executor()
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
