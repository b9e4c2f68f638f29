"""Remote reads (Kafka's RemoteLogManager.read and RemoteLogReader, kafka-reference.md §3.7).

For a fetch offset below the local log start: the epoch of the offset -> the RLMM's
COPY_SEGMENT_FINISHED segment holding it -> the start position from the segment's remote
offset index (RemoteIndexCache) -> batch headers read from there (each batch ending before
the offset is skipped by its header alone) -> the first batch with last offset >= the fetch
offset -> whole batches up to `max_bytes`, read with one bounded range read. When the segment
holds no such batch the next segment is tried. Kafka's rules for the first batch: when it is
larger than `max_bytes` it is returned whole with `min_one_message`, and nothing is returned
without. Unlike Kafka (which may end on a partial batch the client drops), only whole
batches are returned, as a local read does.

read_committed: the aborted transactions overlapping [fetch offset, next offset) come from
this segment's transaction index, then later remote segments' (skipping those whose
metadata says their index is empty, KIP-1058) until one search is complete, then the local
log's.

Byte ranges come from the RSM's `map_range` when it has it (the filesystem tier: read-only
views of its mapped, immutable files, no byte copied), else its `read_range_into` /
`read_range` fast paths (into recycled buffers), else `fetch_log_segment` streams closed after
each use.
"""

from __future__ import annotations

import struct
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from engine._native import records as _records
from engine.errors import OffsetOutOfRangeError
from engine.log.transaction_index import AbortedTxn
from engine.remote.metadata import RemoteLogSegmentMetadata

__all__ = ["RemoteFetchResult", "RemoteSegmentReader", "read_local", "read_remote",
           "remote_aborted_txns"]

#: offset (8) + length (4) + leader epoch/crc (4) + magic (1) + crc/attributes (6) + last
#: offset delta (4) + base timestamp (8) + max timestamp (8): enough for every field used.
_HEADER_PROBE = 43
_MIN_HEADER = 17
_LOG_OVERHEAD = 12
_HEAD = struct.Struct(">qi")
_DELTA = struct.Struct(">i")
_MAX_TS = struct.Struct(">q")
#: bytes read at once while walking batch headers forward from an index position
_WALK_WINDOW = 64 * 1024


@dataclass
class RemoteFetchResult:
    """One partition's answer to a read.

    `records` holds whole batches (a view of the bytes read for a remote read, a zero-copy
    view of the segment for a local one); `next_offset` is the offset after the last batch
    returned (the fetch offset when none is); `aborted_transactions` is filled for read_committed;
    `throttle_time_ms` > 0 means the fetch quota refused the remote read (records empty);
    `error` is set (and records empty) for a partition of `read_many` that failed.
    """

    topic: str
    partition: int
    fetch_offset: int
    records: bytes | memoryview = b""
    next_offset: int = -1
    from_remote: bool = False
    aborted_transactions: list[AbortedTxn] = field(default_factory=list)
    throttle_time_ms: int = 0
    error: Exception | None = None

    @property
    def size_in_bytes(self) -> int:
        return memoryview(self.records).nbytes


class _BufferPool:
    """Read buffers that come back when the last view of them goes (weakref.finalize on the
    numpy view handed out), so remote reads land in memory whose pages are already mapped:
    a fresh 1 MiB buffer costs 256 page faults, more than the pread itself. Buffers are
    power-of-two sizes from 64 KiB; at most `max_bytes` of them are kept free."""

    MIN_SIZE = 64 * 1024

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self._free: dict[int, list[np.ndarray]] = {}
        self._held = 0
        self._lock = threading.Lock()

    def get(self, n: int) -> np.ndarray:
        """A writable uint8 array of `n` bytes."""
        size = max(self.MIN_SIZE, 1 << max(0, n - 1).bit_length())
        base = None
        with self._lock:
            free = self._free.get(size)
            if free:
                base = free.pop()
                self._held -= size
        if base is None:
            base = np.empty(size, dtype=np.uint8)
        view = base[:n]
        weakref.finalize(view, self._put, base)
        return view

    def _put(self, base: np.ndarray) -> None:
        with self._lock:
            if self._held + base.nbytes <= self.max_bytes:
                self._free.setdefault(base.nbytes, []).append(base)
                self._held += base.nbytes


_BUFFERS = _BufferPool()


class RemoteSegmentReader:
    """Byte ranges of one remote segment's `.log`, keeping the last range read so that
    header walks within it cost no further read."""

    def __init__(self, rsm, metadata: RemoteLogSegmentMetadata, nonblocking: bool = False):
        self.rsm = rsm
        self.metadata = metadata
        self.size = metadata.segment_size_in_bytes
        self._start = 0
        self._buf = b""
        self.bytes_read = 0
        # a view of a mapping costs nothing to redo, so ranges are never stitched together
        self._map_range = getattr(rsm, "map_range", None)
        if nonblocking:
            self._map_range = _nonblocking(getattr(rsm, "map_range_if_open"))

    def _fetch(self, start: int, end: int):
        read_range_into = getattr(self.rsm, "read_range_into", None)
        read_range = getattr(self.rsm, "read_range", None)
        if self._map_range is not None:
            data = self._map_range(self.metadata, start, end)
        elif read_range_into is not None:
            buffer = _BUFFERS.get(end - start)
            read_range_into(self.metadata, start, buffer)
            data = memoryview(buffer)
        elif read_range is not None:
            data = read_range(self.metadata, start, end)
        else:
            with self.rsm.fetch_log_segment(self.metadata, start, end - 1) as stream:
                parts, left = [], end - start
                while left > 0:
                    chunk = stream.read(left)
                    if not chunk:
                        break
                    parts.append(chunk)
                    left -= len(chunk)
                data = b"".join(parts)
        self.bytes_read += len(data)
        return data

    def read(self, start: int, end: int) -> memoryview:
        """Bytes [start, min(end, size)). Bytes of the kept range are reused: only what it
        lacks is read."""
        end = min(end, self.size)
        if start >= end:
            return memoryview(b"")
        kept_end = self._start + len(self._buf)
        if self._start <= start < kept_end and end <= kept_end:
            return memoryview(self._buf)[start - self._start:end - self._start]
        if self._start <= start < kept_end and self._map_range is None:
            head = memoryview(self._buf)[start - self._start:]
            self._buf = b"".join((head, self._fetch(kept_end, end)))
        else:
            self._buf = self._fetch(start, end)
        self._start = start
        return memoryview(self._buf)

    def read_exact(self, start: int, end: int) -> memoryview:
        """Bytes [start, min(end, size)) in one buffer of exactly that size: a slice of the
        kept range when it covers them; else a view of the RSM's mapping (`map_range`), or
        the kept head is copied and only the rest is read (into a recycled buffer, with an
        RSM that reads into buffers), or all of it."""
        end = min(end, self.size)
        kept_end = self._start + len(self._buf)
        if self._start <= start and end <= kept_end:
            return memoryview(self._buf)[start - self._start:end - self._start]
        read_range_into = getattr(self.rsm, "read_range_into", None)
        if read_range_into is not None and self._map_range is None and \
                self._start <= start < kept_end:
            buffer = _BUFFERS.get(end - start)
            head = kept_end - start
            buffer[:head] = np.frombuffer(self._buf, dtype=np.uint8,
                                          count=head, offset=start - self._start)
            read_range_into(self.metadata, kept_end, buffer[head:])
            self.bytes_read += end - kept_end
            self._buf, self._start = memoryview(buffer), start
            return self._buf
        self._buf, self._start = b"", start
        return self.read(start, end)

    def header(self, position: int, window: int = _WALK_WINDOW
               ) -> tuple[int, int, int, int] | None:
        """(base offset, batch size, last offset, max timestamp) of the batch at `position`,
        None at the end of the segment. A header outside the kept range reads `window`
        bytes from `position`."""
        if position + _MIN_HEADER > self.size:
            return None
        end = min(self.size, position + _HEADER_PROBE)
        if not (self._start <= position and end <= self._start + len(self._buf)):
            self._buf, self._start = b"", position
            self.read(position, position + max(window, _HEADER_PROBE))
        view = self.read(position, end)
        base, length = _HEAD.unpack_from(view, 0)
        magic = view[16]
        if magic >= 2 and len(view) >= _HEADER_PROBE:
            last = base + _DELTA.unpack_from(view, 23)[0]
            max_ts = _MAX_TS.unpack_from(view, 35)[0]
        else:  # a legacy entry's offset is its last (inner) offset
            last, max_ts = base, -1
        return base, length + _LOG_OVERHEAD, last, max_ts

    def find_batch(self, position: int, offset: int, window: int = _WALK_WINDOW
                   ) -> tuple[int, int, int] | None:
        """(position, size, last offset) of the first batch from `position` whose last offset
        is >= `offset`, None if the segment has none."""
        while True:
            head = self.header(position, window)
            if head is None:
                return None
            _, size, last, _ = head
            if last >= offset:
                return position, size, last
            position += size


class WouldBlock(Exception):
    """A non-blocking remote read needs storage I/O (an index download, opening or
    checking a segment file): it must go to the reader pool."""


def _nonblocking(map_range_if_open):
    def map_range(metadata, start, end):
        view = map_range_if_open(metadata, start, end)
        if view is None:
            raise WouldBlock
        return view
    return map_range


def can_read_without_blocking(rsm) -> bool:
    """Whether `rsm` can say which reads need no storage I/O (`map_range_if_open`)."""
    return callable(getattr(rsm, "map_range_if_open", None))


def _out_of_range(st, offset: int, epoch) -> OffsetOutOfRangeError:
    unified = st.log
    return OffsetOutOfRangeError(
        f"fetch offset {offset} of partition {st.name} does not exist in the remote tier "
        f"(leader epoch {epoch}): no copied segment holds it", offset=offset,
        log_start_offset=unified.log_start_offset, log_end_offset=unified.log_end_offset)


def _segment_for(rlm, st, offset: int):
    epoch = st.log.leader_epoch_cache.epoch_for_offset(offset)
    if epoch is None:
        return None, None
    return epoch, rlm.rlmm.remote_log_segment_metadata(st.tip, epoch, offset)


def _read_segment(rlm, md, offset: int, max_bytes: int, min_one_message: bool,
                  nonblocking: bool = False) -> tuple[memoryview | bytes, int] | None:
    """(whole batches, next offset) from `md`, or None if it holds no batch ending at or
    after `offset`. `nonblocking`: raise WouldBlock instead of any storage I/O."""
    reader = RemoteSegmentReader(rlm.rsm, md, nonblocking)
    if nonblocking:
        entry = rlm.index_cache.cached_entry(md)
        if entry is None:
            raise WouldBlock
        start = entry.lookup_offset(offset)
    else:
        start = rlm.index_cache.lookup_offset(md, offset)
    # batch headers are walked in a window of at most 64 KiB from the index position (the
    # target is within index.interval.bytes of it); the answer is then one exact read,
    # or a slice of the window when the window holds it
    found = reader.find_batch(start, offset, min(max_bytes, _WALK_WINDOW) + _HEADER_PROBE)
    if found is None:
        return None
    position, first_size, _ = found
    if first_size > max_bytes and not min_one_message:
        return b"", offset
    want = max(max_bytes, first_size)
    view = reader.read_exact(position, position + want)
    headers, valid = _records.scan(view, False)
    if not len(headers):
        return b"", offset
    return view[:valid], int(headers["last_offset"][-1]) + 1


def read_remote(rlm, st, offset: int, max_bytes: int, min_one_message: bool,
                isolation: str, nonblocking: bool = False
                ) -> tuple[memoryview | bytes, int, list[AbortedTxn]]:
    """(records: a view of whole batches, next offset, aborted transactions) from the
    remote tier. Raises
    OffsetOutOfRangeError when no copied segment holds `offset`; with `nonblocking`,
    WouldBlock when the read needs storage I/O."""
    epoch, md = _segment_for(rlm, st, offset)
    if md is None:
        raise _out_of_range(st, offset, epoch)
    while md is not None:
        got = _read_segment(rlm, md, offset, max_bytes, min_one_message, nonblocking)
        if got is not None:
            data, next_offset = got
            aborted = []
            if isolation == "read_committed" and len(data):
                aborted = remote_aborted_txns(rlm, st, md, offset, next_offset)
            return data, next_offset, aborted
        _, md = _segment_for(rlm, st, md.end_offset + 1)
    return b"", offset, []


def remote_aborted_txns(rlm, st, md, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions a read_committed fetch of [fetch_offset, upper_bound) reports:
    from `md` and later remote segments until a search completes, then from local ones."""
    out: list[AbortedTxn] = []
    while md is not None:
        if not md.txn_idx_empty:
            entry = rlm.index_cache.get_index_entry(md)
            result = entry.txn_index.collect_aborted_txns(fetch_offset, upper_bound)
            out.extend(result.aborted_transactions)
            if result.is_complete:
                return out
        _, md = _segment_for(rlm, st, md.end_offset + 1)
    out.extend(st.log.collect_aborted_transactions(fetch_offset, upper_bound))
    return out


def read_local(unified, topic: str, partition: int, offset: int, max_bytes: int,
               min_one_message: bool, isolation: str) -> RemoteFetchResult:
    """A read from the local log; read_committed stops at the last stable offset and lists
    the aborted transactions of what it returns."""
    view, next_offset = unified.read(offset, max_bytes, min_one_message)
    aborted = []
    if isolation == "read_committed" and view.nbytes:
        view, next_offset = _trim_to(view, unified.last_stable_offset, offset, next_offset)
        if view.nbytes:
            aborted = unified.collect_aborted_transactions(offset, next_offset)
    return RemoteFetchResult(topic, int(partition), offset, view, next_offset, False, aborted)


def _trim_to(view: memoryview, limit: int, offset: int,
             next_offset: int) -> tuple[memoryview, int]:
    """The batches of `view` starting below `limit`, and the next offset after them."""
    if next_offset <= limit:
        return view, next_offset
    headers, _ = _records.scan(view, False)
    keep = headers[headers["base_offset"] < limit]
    if not len(keep):
        return view[:0], offset
    end = int(keep["position"][-1] + keep["size"][-1])
    return view[:end], int(keep["last_offset"][-1]) + 1
