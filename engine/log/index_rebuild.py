"""Rebuilding a segment's offset and time indexes from its batch headers.

Kafka rebuilds both indexes during recovery (`LogSegment.recover`), one batch at a time:

1. if the batch's max timestamp is above the max so far, it becomes the max, with the batch's
   last offset as its offset (the "shallow" offset of the max timestamp);
2. if more than `index.interval.bytes` were read since the last entry, append offset entry
   (batch last offset, batch position) and time entry (max so far, its offset), the latter
   only if its timestamp is above the previous time entry's;
3. add the batch's size to the bytes read.

At the end a final time entry for the max is added (skipping the full check) and both files
are trimmed. `rebuild_indexes` applies these rules to the header array of a scan
(`engine.records.scan_batches(buf).headers`) in native code, without touching the bytes;
`encode_*`/`write_*` produce files byte-identical to Kafka's trimmed indexes.
"""

from __future__ import annotations

import numpy as np

from engine._native.index import rebuild_entries
from engine.common import write_file_atomically
from engine.errors import InvalidOffsetError
from engine.log._abstract_index import DEFAULT_MAX_INDEX_SIZE, INT32_MAX
from engine.log.offset_index import OFFSET_ENTRY_DTYPE, OFFSET_INDEX_FILE_DTYPE
from engine.log.time_index import TIME_ENTRY_DTYPE, TIME_INDEX_FILE_DTYPE

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "encode_offset_index",
    "encode_time_index",
    "rebuild_indexes",
    "write_offset_index",
    "write_time_index",
]

#: Kafka's `index.interval.bytes` default.
DEFAULT_INDEX_INTERVAL_BYTES = 4096
_REQUIRED = ("position", "size", "last_offset", "max_timestamp")


def rebuild_indexes(headers: np.ndarray, base_offset: int,
                    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                    max_index_size: int = DEFAULT_MAX_INDEX_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """The entries recovery writes to the offset and time index of a segment.

    Args:
        headers: structured array, one row per batch in file order, with fields `position`
            and `size` (bytes, including the 12-byte log overhead), `last_offset` and
            `max_timestamp` (ms, -1 for none). Positions must run contiguously from 0, as in
            a scan of a whole segment. If a boolean `crc_valid` field exists, the rebuild
            stops before the first batch where it is False (recovery truncates there).
        base_offset: the segment's base offset.
        index_interval_bytes: Kafka's `index.interval.bytes`.
        max_index_size: Kafka's `segment.index.bytes`; bounds both indexes' entries.

    Returns:
        (offset_entries, time_entries): OFFSET_ENTRY_DTYPE and TIME_ENTRY_DTYPE arrays with
        absolute offsets.

    Raises:
        ValueError: missing fields, non-contiguous positions, a batch smaller than 12 bytes,
            or max_index_size below one time-index entry.
        InvalidOffsetError: offsets that decrease or do not fit relative to base_offset.
        IndexFullError: more entries than max_index_size allows.
    """
    headers = np.asarray(headers)
    names = headers.dtype.names or ()
    missing = [name for name in _REQUIRED if name not in names]
    if missing:
        raise ValueError(f"batch headers lack field(s) {missing}; have {list(names)}")
    if max_index_size < TIME_INDEX_FILE_DTYPE.itemsize:
        raise ValueError(f"max index size {max_index_size} is below one 12-byte entry")
    if "crc_valid" in names:
        invalid = np.flatnonzero(~headers["crc_valid"].astype(bool))
        if len(invalid):
            headers = headers[: invalid[0]]
    sizes = np.ascontiguousarray(headers["size"], dtype=np.int64)
    expected = np.concatenate(([0], np.cumsum(sizes)[:-1])) if len(sizes) else sizes
    gaps = np.flatnonzero(np.asarray(headers["position"], dtype=np.int64) != expected)
    if len(gaps):
        i = int(gaps[0])
        raise ValueError(f"batch {i} is at position {int(headers['position'][i])} but the "
                         f"batches before it end at {int(expected[i])}: headers must cover a "
                         f"segment contiguously from position 0")
    keys, positions, timestamps, offsets = rebuild_entries(
        sizes, np.ascontiguousarray(headers["last_offset"], dtype=np.int64),
        np.ascontiguousarray(headers["max_timestamp"], dtype=np.int64), int(base_offset),
        int(index_interval_bytes), int(max_index_size) // OFFSET_INDEX_FILE_DTYPE.itemsize,
        int(max_index_size) // TIME_INDEX_FILE_DTYPE.itemsize)
    offset_entries = np.empty(len(keys), dtype=OFFSET_ENTRY_DTYPE)
    offset_entries["offset"], offset_entries["position"] = keys, positions
    time_entries = np.empty(len(timestamps), dtype=TIME_ENTRY_DTYPE)
    time_entries["timestamp"], time_entries["offset"] = timestamps, offsets
    return offset_entries, time_entries


def _relative(offsets: np.ndarray, base_offset: int, what: str) -> np.ndarray:
    relative = np.asarray(offsets, dtype=np.int64) - base_offset
    bad = np.flatnonzero((relative < 0) | (relative > INT32_MAX))
    if len(bad):
        i = int(bad[0])
        raise InvalidOffsetError(f"{what} entry {i}: offset {int(offsets[i])} minus base offset "
                                 f"{base_offset} is outside [0, {INT32_MAX}]",
                                 offset=int(offsets[i]))
    return relative


def encode_offset_index(entries: np.ndarray, base_offset: int) -> bytes:
    """The bytes of a trimmed `.index` holding `entries` (fields `offset`, `position`)."""
    out = np.empty(len(entries), dtype=OFFSET_INDEX_FILE_DTYPE)
    out["relative_offset"] = _relative(entries["offset"], base_offset, "offset index")
    positions = np.asarray(entries["position"], dtype=np.int64)
    if len(positions) and (positions.min() < 0 or positions.max() > INT32_MAX):
        raise ValueError(f"offset index positions must lie in [0, {INT32_MAX}]")
    out["position"] = positions
    return out.tobytes()


def encode_time_index(entries: np.ndarray, base_offset: int) -> bytes:
    """The bytes of a trimmed `.timeindex` holding `entries` (fields `timestamp`, `offset`)."""
    out = np.empty(len(entries), dtype=TIME_INDEX_FILE_DTYPE)
    out["timestamp"] = entries["timestamp"]
    out["relative_offset"] = _relative(entries["offset"], base_offset, "time index")
    return out.tobytes()


def write_offset_index(path, entries: np.ndarray, base_offset: int, *, sync: bool = True) -> None:
    """Writes a trimmed `.index` atomically (temporary file, fsync, rename)."""
    write_file_atomically(path, encode_offset_index(entries, base_offset), sync=sync)


def write_time_index(path, entries: np.ndarray, base_offset: int, *, sync: bool = True) -> None:
    """Writes a trimmed `.timeindex` atomically (temporary file, fsync, rename)."""
    write_file_atomically(path, encode_time_index(entries, base_offset), sync=sync)
