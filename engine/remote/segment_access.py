"""Reading remote segments: what every remote reader shares (the RLM's fetch and ListOffsets,
the Spark source, export), built only on the RemoteStorageManager contract.

- `RemoteSegmentReader`: byte ranges of one segment's `.log` (views of the RSM's mapping when
  its ranges are zero-copy, recycled buffers otherwise) and the walk over batch headers from
  an index position. The walk uses the native scan, which refuses impossible framing (a
  batch length below the minimum, an unknown magic); a batch that claims to run past the
  segment's end is damage too. Each step either advances or grows its window up to the
  segment's size, so a walk always ends: with the batch, with "none here", or with
  CorruptRecordError naming the segment, the byte position and the offset.
- `check_batches`: what a consumer-facing read checks of the batches it hands out, as a
  Kafka consumer with `check.crcs` would, plus what the CRC does not cover (the base offset):
  each batch's CRC, and offsets that continue the previous batch's and stay inside the
  segment's.
- `find_offset_for_timestamp`: the first record at or after a timestamp, from a position.
- `index_bytes` / `aborted_txn_rows`: a segment's index files through the RSM; a transaction
  index the RSM says was never copied reads as empty, any other failure is an error.
- `BufferPool`: read buffers whose pages are already mapped.
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Callable
from functools import partial

import numpy as np

from engine._native import records as _records
from engine.errors import CorruptRecordError, KafkaEngineError, RemoteResourceNotFoundError
from engine.log.transaction_index import ABORTED_TXN_DTYPE, ABORTED_TXN_SIZE
from engine.records import MemoryRecords
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.storage import IndexType, RemoteStorageManager

__all__ = [
    "BUFFERS",
    "BufferPool",
    "NextPositions",
    "RemoteSegmentReader",
    "WouldBlock",
    "aborted_txn_rows",
    "check_batches",
    "describe_segment",
    "find_offset_for_timestamp",
    "index_bytes",
]

#: bytes read at once while walking batch headers forward from an index position
WALK_WINDOW = 64 * 1024
_LOG_OVERHEAD = 12
_LENGTH = struct.Struct(">i")
#: ListOffsets by timestamp scans at most this much per step
_TIMESTAMP_WINDOW = 1 << 20


class WouldBlock(Exception):
    """A non-blocking read needs storage I/O (an index download, opening or checking a
    segment file): the caller must do it where blocking is allowed."""


def describe_segment(metadata: RemoteLogSegmentMetadata) -> str:
    tip = metadata.topic_id_partition
    return (f"remote segment {metadata.remote_log_segment_id.id} of {tip.topic}-"
            f"{tip.partition} (offsets {metadata.start_offset}-{metadata.end_offset})")


class BufferPool:
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


BUFFERS = BufferPool()


class NextPositions:
    """Where the latest remote reads ended: (segment id, next offset) -> byte position of
    the batch after the last one returned. A consumer's next fetch starts where its
    previous one ended, so a sequential reader, entering a segment at its base offset and
    going on from there, needs no `.indexes` GET on its path. The position comes from
    bytes read and checked, and the walk from it checks the offsets again. At most
    `capacity` entries, the oldest dropped first."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self._positions: dict[tuple[object, int], int] = {}
        self._lock = threading.Lock()

    def start(self, md: RemoteLogSegmentMetadata, offset: int) -> int | None:
        """Where a read of `offset` in `md` starts without the offset index: byte 0 at the
        segment's base offset (what the index answers for it), the end of an earlier read
        that stopped right before `offset`; else None."""
        if offset == md.start_offset:
            return 0
        with self._lock:
            return self._positions.get((md.remote_log_segment_id.id, offset))

    def ended(self, md: RemoteLogSegmentMetadata, next_offset: int, position: int) -> None:
        """A read of `md` returned whole batches up to `next_offset`, ending at byte
        `position` (kept while the segment holds `next_offset`)."""
        if next_offset > md.end_offset:
            return
        k = (md.remote_log_segment_id.id, next_offset)
        with self._lock:
            self._positions.pop(k, None)  # the newest goes last
            self._positions[k] = position
            if len(self._positions) > self.capacity:
                del self._positions[next(iter(self._positions))]


class RemoteSegmentReader:
    """Byte ranges of one remote segment's `.log`, keeping the last range read so that
    header walks within it cost no further read. With `nonblocking`, every range comes from
    `map_range_if_open` or the read raises WouldBlock; with `once`, from `read_range_once`
    (ranges read once, such as a segment's tail: the store's cache and read-ahead are left
    alone). `span`: with `nonblocking`, a range is mapped at least this long when it is all
    at hand (a fetch's header walk maps the records it returns next along with it: one
    mapping a fetch)."""

    def __init__(self, rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata,
                 nonblocking: bool = False, once: bool = False, span: int = 0):
        self.rsm = rsm
        self.span = span
        self.metadata = metadata
        self.size = metadata.segment_size_in_bytes
        self.nonblocking = nonblocking
        self.once = once
        # a view of a mapping costs nothing to redo, so ranges are never stitched together;
        # nor are ranges read once (each is whole as read)
        self._views = nonblocking or once or rsm.zero_copy_ranges
        self._start = 0
        self._buf: bytes | memoryview = b""
        self.bytes_read = 0

    def _fetch(self, start: int, end: int):
        if self.nonblocking:
            data = self.rsm.map_range_if_open(self.metadata, start, end)
            if data is None:
                raise WouldBlock
        elif self.once:
            data = memoryview(self.rsm.read_range_once(self.metadata, start, end))
        elif self._views:
            data = self.rsm.map_range(self.metadata, start, end)
        else:
            buffer = BUFFERS.get(end - start)
            self.rsm.read_range_into(self.metadata, start, buffer)
            data = buffer.data
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
        if self._start <= start < kept_end and not self._views:
            buffer = BUFFERS.get(end - start)
            head = kept_end - start
            buffer[:head] = np.frombuffer(self._buf, dtype=np.uint8, count=head,
                                          offset=start - self._start)
            self.rsm.read_range_into(self.metadata, kept_end, buffer[head:])
            self.bytes_read += end - kept_end
            self._buf = buffer.data
        else:
            self._buf = self._fetch_spanned(start, end)
        self._start = start
        return memoryview(self._buf)[:end - start]

    def _fetch_spanned(self, start: int, end: int):
        """Bytes [start, end), or, read without I/O, at least `span` bytes from `start`
        (clamped to the segment) when those are all at hand: the next read of the caller
        then falls inside the kept range. A read that may do I/O takes what was asked (the
        span's tail may lie in a chunk the caller never reads)."""
        wide = min(self.size, start + self.span)
        if not self.nonblocking or wide <= end:
            return self._fetch(start, end)
        data = self.rsm.map_range_if_open(self.metadata, start, wide)
        if data is None:  # the wider range is not all at hand: take what was asked
            return self._fetch(start, end)
        self.bytes_read += len(data)
        return data

    def read_exact(self, start: int, end: int) -> memoryview:
        """Bytes [start, min(end, size)) in one buffer of exactly that size (a slice of the
        kept range when it covers them)."""
        return self.read(start, end)

    def _corrupt(self, message: str, position: int, offset: int | None = None):
        return CorruptRecordError(f"{describe_segment(self.metadata)}: {message}",
                                  position=position, offset=offset)

    def scan_window(self, position: int, window: int) -> tuple[np.ndarray, int]:
        """(header rows with positions relative to the segment, end of the last whole
        batch) of the batches that start at `position` and fit whole in a window of at
        least `window` bytes; the window grows to hold the first batch whole. Raises
        CorruptRecordError for framing the native scan refuses, and for a batch that runs
        past the segment's end. Never returns zero rows below the end of the segment: a
        second pass, with the window holding the first batch whole, frames it or fails."""
        for _ in range(2):
            view = self.read(position, position + window)
            try:
                headers, valid = _records.scan(view, False)
            except KafkaEngineError as exc:
                at = position + int(exc.position or 0)
                raise self._corrupt(f"no record batch frames at byte {at}: {exc.reason}",
                                    at) from None
            if len(headers):
                headers = headers.copy()
                headers["position"] += position
                return headers, position + valid
            if len(view) < _LOG_OVERHEAD:
                raise self._corrupt(f"{len(view)} bytes at byte {position} are too few for "
                                    "a batch header before the segment's end", position)
            claimed = _LOG_OVERHEAD + _LENGTH.unpack_from(view, 8)[0]
            if position + claimed > self.size:
                raise self._corrupt(f"the batch at byte {position} claims {claimed} bytes, "
                                    f"past the segment's end at byte {self.size}", position)
            # the window cut the first batch short: widen it to hold that batch whole
            window = claimed
        raise self._corrupt(f"the batch at byte {position} does not frame within the "
                            f"{window} bytes its length claims", position)

    def find_batch(self, position: int, offset: int, window: int = WALK_WINDOW
                   ) -> tuple[int, int, int] | None:
        """(position, size, last offset) of the first batch from `position` whose last offset
        is >= `offset`, None if the segment has none. The headers walked over must continue
        one another (check_batches without CRCs): the batch before the one found is what
        shows a damaged base offset of a batch read alone."""
        md = self.metadata
        previous = None  # the last batch of the previous window
        while position < self.size:
            headers, position = self.scan_window(position, window)
            hit = np.flatnonzero(headers["last_offset"] >= offset)
            walked = headers[:int(hit[0]) + 1] if len(hit) else headers
            check_batches(_join(previous, walked), partial(describe_segment, md), crc=False,
                          min_offset=md.start_offset, max_offset=md.end_offset)
            previous = walked[-1:]
            if len(hit):
                row = headers[hit[0]]
                return int(row["position"]), int(row["size"]), int(row["last_offset"])
        return None


def check_batches(headers: np.ndarray, where: str | Callable[[], str], *,
                  first_offset: int | None = None, contiguous: bool = True,
                  min_offset: int | None = None, max_offset: int | None = None,
                  position: int = 0, crc: bool = True) -> None:
    """Checks what a consumer is handed (one read's batches, `headers` from a scan with
    CRCs): every CRC valid; offsets increasing, and with `contiguous` each v2 batch starting
    right after the previous one (a tiered log is never compacted, so its offsets have no
    gaps); every batch inside [min_offset, max_offset]; the first one ending at or after
    `first_offset` (and holding it, with `contiguous`). `crc=False` leaves the CRCs to a
    caller that checks them as it decodes. CorruptRecordError names `where` (a string, or
    a function giving it, called only for an error), the byte position (`position` is the
    byte of the first row) and the offset.

    Every read runs this, so good batches cost a few whole-array tests; only damage pays
    for finding the first wrong batch."""
    if not len(headers) or _all_good(headers, first_offset, contiguous, min_offset,
                                     max_offset, crc):
        return
    _raise_first_damage(headers, where if isinstance(where, str) else where(),
                        first_offset=first_offset, contiguous=contiguous,
                        min_offset=min_offset, max_offset=max_offset, position=position,
                        crc=crc)


def _all_good(headers: np.ndarray, first_offset, contiguous: bool, min_offset, max_offset,
              crc: bool) -> bool:
    """Whether check_batches passes (the same rules, as whole-array tests)."""
    if crc and not headers["crc_valid"].all():
        return False
    base, last = headers["base_offset"], headers["last_offset"]
    if not (base <= last).all():
        return False
    if len(base) > 1:
        if contiguous and (headers["magic"] >= 2).all():  # each starts after the previous
            follows = (base[1:] == last[:-1] + 1).all()
        else:
            follows = (base[1:] > last[:-1]).all() and (
                not contiguous or _rule_holds_mixed(headers))
        if not follows:
            return False
    # offsets increase from here on: the ends of the array bound every batch
    if min_offset is not None and base[0] < min_offset:
        return False
    if max_offset is not None and last[-1] > max_offset:
        return False
    if first_offset is None:
        return True
    # the first batch holds the fetch offset (or, with gaps allowed, ends at or after it)
    return last[0] >= first_offset and not (
        contiguous and headers["magic"][0] >= 2
        and base[0] > max(first_offset, min_offset or first_offset))


def _rule_holds_mixed(headers: np.ndarray) -> bool:
    """The contiguity rule for a read mixing v2 batches with older ones (whose offsets
    may have gaps): each pair of v2 neighbours continues one another."""
    base, last = headers["base_offset"], headers["last_offset"]
    v2 = (headers["magic"][1:] >= 2) & (headers["magic"][:-1] >= 2)
    return bool((~v2 | (base[1:] == last[:-1] + 1)).all())


def _join(previous: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """`rows` after the one row of `previous` (without np.concatenate, whose field
    promotion of structured arrays costs more than the check itself)."""
    if previous is None:
        return rows
    out = np.empty(len(rows) + 1, dtype=rows.dtype)
    out[0] = previous[0]
    out[1:] = rows
    return out


def _raise_first_damage(headers: np.ndarray, where: str, *, first_offset: int | None,
                        contiguous: bool, min_offset: int | None, max_offset: int | None,
                        position: int, crc: bool) -> None:
    """Raises CorruptRecordError for the first batch that check_batches refuses."""
    bad = np.flatnonzero(~headers["crc_valid"]) if crc else np.empty(0, dtype=np.intp)
    if len(bad):
        row = headers[bad[0]]
        raise CorruptRecordError(
            f"{where}: CRC mismatch in the batch at byte {position + int(row['position'])} "
            f"(offsets {int(row['base_offset'])}-{int(row['last_offset'])}, stored CRC "
            f"0x{int(row['crc']):08x})", position=position + int(row["position"]),
            offset=int(row["base_offset"]))
    base, last = headers["base_offset"], headers["last_offset"]
    wrong = np.flatnonzero(base > last)
    if len(base) > 1:
        follows = base[1:] > last[:-1]
        if contiguous:
            v2 = (headers["magic"][1:] >= 2) & (headers["magic"][:-1] >= 2)
            follows &= ~v2 | (base[1:] == last[:-1] + 1)
        wrong = np.union1d(wrong, np.flatnonzero(~follows) + 1)
    if min_offset is not None:
        wrong = np.union1d(wrong, np.flatnonzero(base < min_offset))
    if max_offset is not None:
        wrong = np.union1d(wrong, np.flatnonzero(last > max_offset))
    if first_offset is not None and (last[0] < first_offset or (
            contiguous and headers["magic"][0] >= 2
            and base[0] > max(first_offset, min_offset or first_offset))):
        wrong = np.union1d(wrong, [0])
    if len(wrong):
        i = int(wrong[0])
        row = headers[i]
        before = (f" after a batch ending at offset {int(last[i - 1])}" if i else "")
        raise CorruptRecordError(
            f"{where}: the batch at byte {position + int(row['position'])} claims offsets "
            f"{int(row['base_offset'])}-{int(row['last_offset'])}{before}, which do not "
            f"continue the log" + (f" within offsets {min_offset}-{max_offset}"
                                   if min_offset is not None else "")
            + " (a damaged base offset: the batch CRC does not cover it)",
            position=position + int(row["position"]), offset=int(row["base_offset"]))


def find_offset_for_timestamp(reader: RemoteSegmentReader, position: int, timestamp: int,
                              min_offset: int, max_offset: int | None = None
                              ) -> tuple[int, int] | None:
    """(offset, leader epoch or -1) of the first record at or after `timestamp` with an
    offset in [min_offset, max_offset) in the segment from byte `position`, None if it has
    none. Only batches whose max timestamp reaches `timestamp` are decoded. The answer is
    an offset a consumer seeks to, so the headers walked are checked as a fetch checks them
    (offsets that continue one another inside the segment's) and so is the CRC of each
    batch decoded."""
    size = reader.size
    md = reader.metadata
    where = partial(describe_segment, md)
    previous = None  # the last batch of the previous window
    while position < size:
        headers, end = reader.scan_window(position, _TIMESTAMP_WINDOW)
        check_batches(_join(previous, headers), where, crc=False, min_offset=md.start_offset,
                      max_offset=md.end_offset)
        previous = headers[-1:]
        keep = (headers["max_timestamp"] >= timestamp) & ~headers["is_control"] \
            & (headers["last_offset"] >= min_offset)
        if max_offset is not None:
            keep &= headers["base_offset"] < max_offset
        for i in np.flatnonzero(keep):
            row = headers[i]
            start = int(row["position"])
            view = reader.read(start, start + int(row["size"]))
            check_batches(_records.scan(view, True)[0], where, position=start)
            batch = MemoryRecords(view)
            cols = batch.decode_columns(0, 1, min_offset=min_offset,
                                        max_offset=-1 if max_offset is None else max_offset,
                                        include_control=False)
            hits = np.flatnonzero(cols.timestamp >= timestamp)
            if len(hits):
                epoch = int(row["partition_leader_epoch"])
                return int(cols.offset[hits[0]]), epoch if epoch >= 0 else -1
        position = end
    return None


def index_bytes(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata,
                index_type: IndexType) -> bytes:
    """A segment's index file. A transaction index that was not copied (the metadata says
    the segment has none, or the RSM answers RemoteResourceNotFoundError for it) is empty;
    every other failure raises."""
    if index_type is IndexType.TRANSACTION and metadata.txn_idx_empty:
        return b""
    try:
        return rsm.fetch_index_bytes(metadata, index_type)
    except RemoteResourceNotFoundError:
        if index_type is not IndexType.TRANSACTION:
            raise
        return b""


def aborted_txn_rows(rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata
                     ) -> np.ndarray:
    """The ABORTED_TXN_DTYPE rows of the segment's transaction index."""
    data = index_bytes(rsm, metadata, IndexType.TRANSACTION)
    if len(data) % ABORTED_TXN_SIZE:
        raise CorruptRecordError(
            f"{describe_segment(metadata)}: its transaction index has {len(data)} bytes, not "
            f"a multiple of the {ABORTED_TXN_SIZE}-byte entry", position=len(data))
    return np.frombuffer(data, dtype=ABORTED_TXN_DTYPE, count=len(data) // ABORTED_TXN_SIZE)
