"""A remote segment's indexes checked against its `.log`.

Kafka trusts the indexes it wrote; a remote tier's indexes may have been written by someone
else, or damaged since, and the transaction index decides what a read_committed consumer
sees, the time and offset indexes what ListOffsets answers. So they are checked against the
segment's batches before they are used for that:
- transaction index: every entry is an ABORT marker of the segment (producer id, last
  offset), its first offset is a transactional batch of that producer (or lies before the
  segment: the transaction began in an earlier one), its last stable offset is not past the
  marker, entries come in offset order, and every ABORT marker of the segment has its entry;
- offset index: every entry points at a batch start holding an offset at or below the
  entry's, offsets increase;
- time index: every entry's offset is in a batch of the segment and its timestamp is the
  largest timestamp of the batches up to that one (Kafka writes the max timestamp so far
  and the offset where it was seen), timestamps do not decrease.

`scan_segment` walks every batch header of the `.log` (framing and offsets checked, CRCs
when asked); `end_txn_markers` reads the COMMIT/ABORT markers among them. `IndexVerdicts`
keeps, per segment, what was found once (a segment id names one upload, whose objects never
change), so that a reader pays for the walk once per process; `VERDICTS` is the process's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from engine.errors import CorruptIndexError, CorruptRecordError
from engine.log.offset_index import OffsetIndex
from engine.log.time_index import TimeIndex
from engine.log.transaction_index import ABORTED_TXN_SIZE
from engine.records import MemoryRecords
from engine.records.control import ControlRecordType, parse_control_record
from engine.remote.metadata import RemoteLogSegmentMetadata
from engine.remote.segment_access import (
    aborted_txn_rows,
    check_batches,
    describe_segment,
    index_bytes,
)
from engine.remote.storage import IndexType

__all__ = ["MARKER_DTYPE", "VERDICTS", "IndexMismatch", "IndexVerdicts", "aborts_mismatch",
           "end_txn_markers", "markers_in", "offset_index_mismatch", "scan_segment",
           "time_index_mismatch", "transaction_index_mismatch"]

#: `.log` bytes read (and scanned) at once while walking a whole segment, per thread: a
#: window's chunks are fetched in parallel, so larger windows keep more GETs in flight (8 MiB
#: windows scrubbed at 0.6x raw sequential GETs, 32 MiB ones at 0.85x: bench/compare_scrub.py)
WINDOW = 32 << 20
#: COMMIT/ABORT markers of a segment
MARKER_DTYPE = np.dtype([("producer_id", "<i8"), ("offset", "<i8"), ("abort", "?")])
#: the indexes a verdict covers
TRANSACTION, OFFSET, TIME = "transaction", "offset", "time"


@dataclass(frozen=True)
class IndexMismatch:
    """An index that disagrees with its segment: which one, the byte of the entry in the
    index file (-1 for an entry that is missing), the offset concerned and how."""

    index: str
    position: int
    offset: int
    detail: str

    def error(self, md: RemoteLogSegmentMetadata) -> CorruptIndexError:
        at = "" if self.position < 0 else f" (entry at byte {self.position})"
        return CorruptIndexError(f"{describe_segment(md)}: its {self.index} index{at} "
                                 f"disagrees with the segment: {self.detail}",
                                 position=None if self.position < 0 else self.position,
                                 offset=self.offset)


def scan_segment(rsm, md: RemoteLogSegmentMetadata, verify_crc: bool = False) -> np.ndarray:
    """Every batch header of the `.log`, read in windows through the RSM: framing, offsets
    that continue one another inside the segment's, the last ending at its end offset, and
    (with `verify_crc`) every batch CRC. CorruptRecordError names the segment and byte."""
    where = describe_segment(md)
    size = md.segment_size_in_bytes
    parts, position, window = [], 0, WINDOW
    while position < size:
        end = min(size, position + window)
        records = MemoryRecords(rsm.read_range(md, position, end))
        headers = records.scan(verify_crc=verify_crc)
        if not len(headers):
            if end == size:
                raise CorruptRecordError(f"{where}: {size - position} bytes at byte {position} "
                                         "are not a whole batch before the segment's end",
                                         position=position)
            window *= 2  # one batch larger than the window
            continue
        headers = headers.copy()
        check_batches(headers, where, position=position, min_offset=md.start_offset,
                      max_offset=md.end_offset, crc=verify_crc)
        headers["position"] += position
        parts.append(headers)
        position += records.valid_bytes
        window = WINDOW
    if not parts:
        raise CorruptRecordError(f"{where}: the segment is empty", position=0)
    headers = np.concatenate(parts)
    check_batches(headers, where, crc=False, min_offset=md.start_offset,
                  max_offset=md.end_offset)
    last = int(headers["last_offset"][-1])
    if last != md.end_offset:
        raise CorruptRecordError(f"{where}: its last batch ends at offset {last}, its metadata "
                                 f"says {md.end_offset}", offset=last)
    return headers


def end_txn_markers(rsm, md: RemoteLogSegmentMetadata, headers: np.ndarray) -> np.ndarray:
    """The segment's COMMIT and ABORT markers (MARKER_DTYPE), from its control batches."""
    def batch_bytes(row):
        start = int(row["position"])
        return rsm.read_range(md, start, start + int(row["size"]))
    return _markers(headers, batch_bytes)


def markers_in(data, headers: np.ndarray) -> np.ndarray:
    """The COMMIT and ABORT markers among whole batches `data` (`headers` their scan rows,
    positions indexing `data`)."""
    view = memoryview(data)
    return _markers(headers, lambda row: view[int(row["position"]):
                                              int(row["position"]) + int(row["size"])])


def _markers(headers: np.ndarray, batch_bytes) -> np.ndarray:
    rows = headers[headers["is_control"] & (headers["producer_id"] >= 0)]
    out = np.zeros(len(rows), dtype=MARKER_DTYPE)
    keep = np.zeros(len(rows), dtype=bool)
    for i, row in enumerate(rows):
        batch = next(MemoryRecords(batch_bytes(row)).batches())
        record = next(iter(batch.records()), None)
        if record is None:
            continue
        control = parse_control_record(record.key, record.value)
        if control.type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            out[i] = (int(row["producer_id"]), int(row["base_offset"]),
                      control.type is ControlRecordType.ABORT)
            keep[i] = True
    return out[keep]


def aborts_mismatch(aborted, headers: np.ndarray, markers: np.ndarray, first_offset: int,
                    last_offset: int) -> IndexMismatch | None:
    """Aborted transactions `aborted` ((producer id, first offset, last offset), as a
    transaction index lists them) against the batches `headers` and `markers` that hold
    offsets [first_offset, last_offset]: each one whose marker is among those offsets is an
    ABORT marker of its producer, each one whose first offset is among them begins with a
    transactional batch of its producer, and every ABORT marker among them is listed."""
    aborts = {(int(m["producer_id"]), int(m["offset"])) for m in markers if m["abort"]}
    data = headers[~headers["is_control"]]
    firsts = {int(o): (int(p), bool(t)) for o, p, t in
              zip(data["base_offset"], data["producer_id"], data["is_transactional"])}
    for i, (pid, first, last) in enumerate(aborted):
        if first_offset <= last <= last_offset and (pid, last) not in aborts:
            return IndexMismatch(TRANSACTION, i * ABORTED_TXN_SIZE, last,
                                 f"entry {i} says producer {pid} aborted at offset {last}, "
                                 "where the segment has no ABORT marker of that producer")
        if first > last or (first_offset <= first <= last_offset
                            and firsts.get(first) != (pid, True)):
            return IndexMismatch(TRANSACTION, i * ABORTED_TXN_SIZE, first,
                                 f"entry {i} says producer {pid}'s aborted transaction "
                                 f"began at offset {first}, where no transactional batch of "
                                 "that producer begins")
    missing = sorted(aborts - {(pid, last) for pid, _, last in aborted}, key=lambda m: m[1])
    if missing:
        pid, offset = missing[0]
        return IndexMismatch(TRANSACTION, -1, offset, f"has no entry for the ABORT marker of "
                                                      f"producer {pid} at offset {offset}")
    return None


def transaction_index_mismatch(md: RemoteLogSegmentMetadata, rows: np.ndarray,
                               headers: np.ndarray, markers: np.ndarray
                               ) -> IndexMismatch | None:
    """The first entry of the transaction index (ABORTED_TXN_DTYPE `rows`) that the segment
    contradicts, or the first ABORT marker without its entry; None when they agree."""
    lasts = rows["last_offset"].astype(np.int64)
    order = np.flatnonzero(np.diff(lasts) <= 0)
    if len(order):
        i = int(order[0]) + 1
        return IndexMismatch(TRANSACTION, i * ABORTED_TXN_SIZE, int(lasts[i]),
                             f"entry {i} (marker offset {int(lasts[i])}) is not after the "
                             f"previous one's ({int(lasts[i - 1])})")
    late = np.flatnonzero(rows["last_stable_offset"].astype(np.int64) > lasts + 1)
    if len(late):
        i = int(late[0])
        return IndexMismatch(TRANSACTION, i * ABORTED_TXN_SIZE, int(lasts[i]),
                             f"entry {i} gives last stable offset "
                             f"{int(rows['last_stable_offset'][i])}, past its marker at "
                             f"{int(lasts[i])}")
    return aborts_mismatch([(int(r["producer_id"]), int(r["first_offset"]),
                             int(r["last_offset"])) for r in rows],
                           headers, markers, md.start_offset, md.end_offset)


def offset_index_mismatch(md: RemoteLogSegmentMetadata, entries: np.ndarray,
                          headers: np.ndarray) -> IndexMismatch | None:
    """The first offset-index entry that does not point at a batch start holding an offset
    at or below its own (or does not increase); None when every one does."""
    if not len(entries):
        return None
    starts = headers["position"].astype(np.int64)
    offsets = entries["offset"].astype(np.int64)
    positions = entries["position"].astype(np.int64)
    i = np.searchsorted(starts, positions)
    at = np.minimum(i, len(starts) - 1)
    good = (i < len(starts)) & (starts[at] == positions) \
        & (headers["base_offset"][at] <= offsets) & (offsets <= md.end_offset)
    good[1:] &= np.diff(offsets) > 0
    bad = np.flatnonzero(~good)
    if not len(bad):
        return None
    k = int(bad[0])
    return IndexMismatch(OFFSET, 8 * k, int(offsets[k]),
                         f"entry (offset {int(offsets[k])}, position {int(positions[k])}) does "
                         "not point at a batch start holding an offset at or below it")


def time_index_mismatch(md: RemoteLogSegmentMetadata, entries: np.ndarray,
                        headers: np.ndarray) -> IndexMismatch | None:
    """The first time-index entry whose offset is outside the segment's batches or whose
    timestamp is not the largest of the batches up to that offset; None when none is."""
    if not len(entries):
        return None
    running = np.maximum.accumulate(headers["max_timestamp"].astype(np.int64))
    stamps = entries["timestamp"].astype(np.int64)
    offsets = entries["offset"].astype(np.int64)
    i = np.searchsorted(headers["last_offset"], offsets)
    at = np.minimum(i, len(headers) - 1)
    good = (md.start_offset <= offsets) & (offsets <= md.end_offset) & (i < len(headers)) \
        & (headers["base_offset"][at] <= offsets) & (stamps == running[at])
    good[1:] &= np.diff(stamps) >= 0
    bad = np.flatnonzero(~good)
    if not len(bad):
        return None
    k = int(bad[0])
    return IndexMismatch(TIME, 12 * k, int(offsets[k]),
                         f"entry (timestamp {int(stamps[k])}, offset {int(offsets[k])}) is not "
                         "the largest timestamp of the segment's batches up to that offset")


def _mismatches(rsm, md: RemoteLogSegmentMetadata, kinds: tuple[str, ...]
                ) -> dict[str, IndexMismatch | None]:
    headers = scan_segment(rsm, md)
    out: dict[str, IndexMismatch | None] = {}
    if TRANSACTION in kinds:
        out[TRANSACTION] = transaction_index_mismatch(
            md, aborted_txn_rows(rsm, md), headers, end_txn_markers(rsm, md, headers))
    if OFFSET in kinds or TIME in kinds:
        offsets = OffsetIndex.from_buffer(index_bytes(rsm, md, IndexType.OFFSET),
                                          md.start_offset).entries_array()
        out[OFFSET] = offset_index_mismatch(md, offsets, headers)
    if TIME in kinds:
        times = TimeIndex.from_buffer(index_bytes(rsm, md, IndexType.TIMESTAMP),
                                      md.start_offset).entries_array()
        out[TIME] = time_index_mismatch(md, times, headers)
    return out


class IndexVerdicts:
    """What was found of each segment's indexes, kept per (store, segment id, index) for at
    most `capacity` segments, the oldest dropped first. `require` raises the mismatch found
    (CorruptIndexError naming the segment, the entry and the offset) every time it is asked
    again, and walks a segment once for all the indexes asked together."""

    def __init__(self, capacity: int = 100_000):
        self.capacity = capacity
        self._found: OrderedDict[tuple, dict[str, IndexMismatch | None]] = OrderedDict()
        self._lock = threading.Lock()

    def require(self, rsm, md: RemoteLogSegmentMetadata, *kinds: str) -> None:
        key = (id(rsm), md.remote_log_segment_id)
        with self._lock:
            known = self._found.get(key, {})
        wanted = tuple(k for k in kinds if k not in known)
        if wanted:
            found = _mismatches(rsm, md, wanted)
            with self._lock:
                known = {**self._found.get(key, {}), **found}
                self._found[key] = known
                self._found.move_to_end(key)
                while len(self._found) > self.capacity:
                    self._found.popitem(last=False)
        for kind in kinds:
            mismatch = known.get(kind)
            if mismatch is not None:
                raise mismatch.error(md)

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


#: the verdicts of every reader of this process
VERDICTS = IndexVerdicts()
