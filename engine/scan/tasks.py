"""Executor side of a scan: a task's planned byte ranges read through the RSM (one per
process and configuration, the process's pooled read buffers, the next segment prefetched)
and decoded to Arrow (engine.scan.decode), the next batch decoded on a helper thread.
Spark's tasks run it; it needs no Spark."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from engine.errors import KafkaEngineError, RemoteStorageError
from engine.remote.segment_access import RemoteSegmentReader
from engine.scan.decode import describe_range, scan_range
from engine.scan.planning import SegmentRange

__all__ = ["executor_properties", "read_bytes", "remote_storage_for", "scan_ranges"]

_rsm_lock = threading.Lock()
_rsm_by_props: dict[tuple, object] = {}


def remote_storage_for(props: Mapping[str, str]):
    """One RemoteStorageManager per distinct configuration per process (Spark reuses its
    Python workers, so tasks after the first skip the set-up)."""
    from engine.scan.tier import create_rsm

    key = tuple(sorted(props.items()))
    with _rsm_lock:
        rsm = _rsm_by_props.get(key)
        if rsm is None:
            rsm = _rsm_by_props[key] = create_rsm(executor_properties(props))
        return rsm


def executor_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The RSM settings tasks use. Tasks check the CRC of every batch they decode, so the
    filesystem tier's whole-file check on a process's first read of a segment (which reads
    the entire `.log` for a task that wants a slice of it) is left out unless asked for."""
    out = dict(props)
    if not out.get("remote.log.storage.manager.class.name"):
        prefix = out.get("remote.log.storage.manager.impl.prefix", "rsm.config.")
        out.setdefault(f"{prefix}log.read.verification", "size")
    return out


def read_bytes(rsm, r: SegmentRange) -> memoryview:
    """The range's bytes, as every remote read takes them (segment_access.RemoteSegmentReader:
    a view of the store's mapping when its ranges are zero-copy, else a buffer of the
    process's one pool, which comes back when the last view of it goes)."""
    where = describe_range(r)
    try:
        data = RemoteSegmentReader(rsm, r.segment).read_exact(r.start_position, r.end_position)
    except KafkaEngineError as exc:  # its position is the object's own: kept as it is
        raise exc.with_context(where) from None
    if len(data) != r.size:
        raise RemoteStorageError(
            f"{where}: the remote segment returned {len(data)} bytes, expected {r.size} "
            f"(segment_size_in_bytes {r.segment.segment_size_in_bytes})")
    return data


def scan_ranges(ranges: Sequence[SegmentRange], props: Mapping[str, str], schema,
                rsm_factory: Callable | None = None, *, decode_ahead: bool = True
                ) -> Iterator:
    """Arrow batches of every range in order (one task's work). With `decode_ahead`, the
    next batch is read and decoded on a helper thread (both release the GIL) while Spark's
    worker sends the current one to the JVM."""
    def batches():
        rsm = (rsm_factory or remote_storage_for)(props)
        for i, r in enumerate(ranges):
            if rsm.reads_ahead:  # the task reads on: prefetch its next segment too
                rsm.read_forward(r.segment, _next_segment(ranges, i))
            yield from scan_range(read_bytes(rsm, r), r, schema)

    return _one_ahead(batches()) if decode_ahead else batches()


def _next_segment(ranges: Sequence[SegmentRange], i: int):
    """The segment the task reads after range i's, in the same partition, or None."""
    r = ranges[i]
    for later in ranges[i + 1:]:
        if (later.topic, later.partition) != (r.topic, r.partition):
            return None
        if later.segment.remote_log_segment_id != r.segment.remote_log_segment_id:
            return later.segment
    return None


_END = object()


def _one_ahead(iterator: Iterator) -> Iterator:
    """`iterator`'s items, each computed on a helper thread while the previous one is
    consumed (at most one in flight; errors surface in order)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="kafka-tiered-decode")
    try:
        pending = pool.submit(next, iterator, _END)
        while True:
            item = pending.result()
            if item is _END:
                return
            pending = pool.submit(next, iterator, _END)
            yield item
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
