"""A planned range's bytes -> Arrow record batches of the Kafka source's schema, column by
column (no per-record Python objects). The one decoding of a scan: Spark tasks and
engine.arrow both call `scan_range`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from engine.errors import CorruptIndexError, CorruptRecordError, KafkaEngineError
from engine.records import MemoryRecords
from engine.remote.index_check import aborts_mismatch, markers_in
from engine.remote.segment_access import check_batches
from engine.scan.planning import SegmentRange

__all__ = ["ARROW_BATCH_BYTES", "aborted_batches", "batch_runs", "columns_to_arrow",
           "describe_range", "scan_range", "timestamp_us"]

#: Remote bytes decoded into one Arrow batch: big enough to amortize the per-batch cost
#: in Spark's Arrow ingestion, small enough to keep a task's memory flat.
ARROW_BATCH_BYTES = 4 << 20


def describe_range(r: SegmentRange) -> str:
    """What an error while reading `r` names: the partition, segment, offsets and bytes."""
    s = r.segment
    return (f"{r.topic}-{r.partition} remote segment {s.remote_log_segment_id.id} "
            f"(offsets {s.start_offset}-{s.end_offset}, bytes {r.start_position}-"
            f"{r.end_position})")


def timestamp_us(ms: np.ndarray):
    """Kafka's ms timestamps as an Arrow timestamp[us, UTC] array (one multiply, no
    per-value work)."""
    import pyarrow as pa

    us = np.multiply(ms, 1000, dtype=np.int64)
    return pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), len(us), [None, pa.py_buffer(us)])


def columns_to_arrow(cols, topic: str, partition: int, schema, mask: np.ndarray | None = None):
    """RecordColumns -> a RecordBatch of `schema`: any selection of the Kafka source's
    columns, in any order; only the columns it names are built. `mask` keeps the records
    where it is True."""
    import pyarrow as pa

    n = cols.num_records
    build = {
        "key": cols.keys,
        "value": cols.values,
        "topic": lambda: pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": lambda: pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": lambda: pa.array(cols.offset),
        "timestamp": lambda: timestamp_us(cols.timestamp),
        "timestampType": lambda: pa.array(cols.timestamp_type.astype(np.int32)),
        "headers": cols.header_lists,
    }
    batch = pa.RecordBatch.from_arrays([build[name]() for name in schema.names], schema=schema)
    if mask is not None:
        batch = batch.filter(pa.array(mask))
    return batch


def aborted_batches(headers: np.ndarray, aborted: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """Per scan row: True when the batch is a transactional batch of an aborted transaction
    (same producer id, base offset within [first offset, last offset] of the abort)."""
    out = np.zeros(len(headers), dtype=bool)
    if not aborted or not len(headers):
        return out
    transactional = headers["is_transactional"] & ~headers["is_control"]
    pid, base = headers["producer_id"], headers["base_offset"]
    for producer_id, first, last in aborted:
        out |= transactional & (pid == producer_id) & (base >= first) & (base <= last)
    return out


def _check_aborted(r: SegmentRange, data, headers: np.ndarray) -> None:
    """The aborted transactions a read_committed scan skips (from the transaction indexes)
    against this range's own batches: each one whose ABORT marker or first batch lies in
    the range is there, and every ABORT marker in the range is listed. Each range checks its
    own offsets, so a scan checks every marker it reads without reading anything more."""
    found = aborts_mismatch(r.aborted or (), headers, markers_in(data, headers),
                            int(headers["base_offset"][0]), int(headers["last_offset"][-1]))
    if found is not None:
        raise CorruptIndexError(f"{describe_range(r)}: the transaction indexes disagree with "
                                f"the segment: {found.detail}", offset=found.offset)


def batch_runs(keep: np.ndarray, sizes: np.ndarray, chunk_bytes: int) -> list[tuple[int, int]]:
    """[start, stop) rows of kept batches, cut into runs of about `chunk_bytes`."""
    rows = np.flatnonzero(keep)
    out: list[tuple[int, int]] = []
    if not len(rows):
        return out
    for run in np.split(rows, np.flatnonzero(np.diff(rows) != 1) + 1):
        a, b = int(run[0]), int(run[-1]) + 1
        ends = np.cumsum(sizes[a:b], dtype=np.int64)
        cuts = np.searchsorted(ends, np.arange(chunk_bytes, int(ends[-1]), chunk_bytes))
        edges = sorted({a, b, *(a + int(c) + 1 for c in cuts)})
        out += [(x, y) for x, y in itertools.pairwise(edges) if x < y]
    return out


def _timestamp_mask(ms: np.ndarray, timestamps: tuple[int | None, int | None] | None
                    ) -> np.ndarray | None:
    """Records with lo <= timestamp < hi, or None when every record is kept."""
    lo, hi = timestamps or (None, None)
    if lo is None and hi is None:
        return None
    mask = np.ones(len(ms), dtype=bool)
    if lo is not None:
        mask &= ms >= lo
    if hi is not None:
        mask &= ms < hi
    return None if mask.all() else mask


def scan_range(data, r: SegmentRange, schema, *, chunk_bytes: int = ARROW_BATCH_BYTES,
               decode: Mapping[str, bool] | None = None,
               timestamps: tuple[int | None, int | None] | None = None) -> Iterator:
    """Arrow batches of `schema` (see columns_to_arrow) of one range whose bytes are `data`:
    the records a consumer is handed (no control record, no batch of an aborted transaction
    of `r.aborted`: those are never decoded), each batch's offsets checked against the
    segment and its CRC as it decodes. Batches whose max timestamp is below
    `r.min_timestamp` are skipped; with `timestamps` (lo, hi: ms, either None) only the
    records in [lo, hi) are kept. `decode` holds decode_columns' column switches (views,
    with_keys, ...). Errors name the range and positions in the segment."""
    where = describe_range(r)
    records = MemoryRecords(data)
    try:
        headers = records.scan()
        if records.partial_bytes:
            raise CorruptRecordError(
                f"the range ends inside a batch: {records.partial_bytes} bytes after the last "
                "whole batch", position=records.valid_bytes)
        # the CRCs are checked as batches decode; offsets, which no CRC covers, here
        check_batches(headers, where, crc=False, min_offset=r.segment.start_offset,
                      max_offset=r.segment.end_offset, position=r.start_position)
        keep = (headers["last_offset"] >= r.min_offset) & (headers["base_offset"] < r.max_offset)
        keep &= ~headers["is_control"]  # consumers never see control records
        if r.min_timestamp is not None:
            keep &= headers["max_timestamp"] >= r.min_timestamp
        if r.aborted is not None and len(headers):
            _check_aborted(r, data, headers)
        if r.aborted:  # whole batches: a batch holds one transaction's records
            keep &= ~aborted_batches(headers, r.aborted)
        for a, b in batch_runs(keep, headers["size"], chunk_bytes):
            cols = records.decode_columns(a, b, min_offset=r.min_offset,
                                          max_offset=r.max_offset, include_control=False,
                                          verify_crc=True, **(decode or {}))
            if cols.num_records == 0:
                continue
            batch = columns_to_arrow(cols, r.topic, r.partition, schema,
                                     _timestamp_mask(cols.timestamp, timestamps))
            if batch.num_rows:
                yield batch
    except KafkaEngineError as exc:
        if exc.reason.startswith(where):  # check_batches': named, at segment positions
            raise
        # positions in the range's bytes: made the segment's
        raise exc.with_context(where, position_base=r.start_position) from None
