# distutils: sources = _native/src/index.c
# cython: language_level=3
"""Index entries rebuilt from batch headers (Kafka's LogSegment.recover rule), and the words
and typed errors for the IX statuses that the rebuild and the index appends return.

`rebuild_entries` computes, without reading the log's bytes again, the offset- and time-index
entries recovery writes for a run of batches (`ix_rebuild` in `_native/src/index.c`). The IX
statuses it returns are the ones `OffsetIndexCore` / `TimeIndexCore` appends return (see
engine._native.index, which re-exports every name here), so the words for each status and
the error it is raised as are kept here as well.
"""

from libc.stddef cimport ptrdiff_t
from libc.stdint cimport int64_t

from index cimport (
    IX_OFFSET_INDEX_FULL,
    IX_OFFSET_NOT_INCREASING,
    IX_OFFSET_OVERFLOW,
    IX_OK,
    IX_POSITION_OVERFLOW,
    IX_SIZE_INVALID,
    IX_TIME_DECREASING,
    IX_TIME_INDEX_FULL,
    IX_TIME_OFFSET_DECREASING,
    ix_rebuild,
)
from engine._native.errors cimport error_for
from status cimport ENG_ERR_ARGUMENT, ENG_ERR_INDEX_FULL, ENG_ERR_INVALID_OFFSET

import numpy as np

__all__ = [
    "rebuild_entries", "append_status_message", "status_error", "STATUS_OFFSET_NOT_INCREASING",
    "STATUS_OFFSET_OVERFLOW", "STATUS_POSITION_OVERFLOW", "STATUS_OFFSET_INDEX_FULL",
    "STATUS_TIME_INDEX_FULL", "STATUS_TIME_OFFSET_DECREASING", "STATUS_TIME_DECREASING",
]


cdef str _rebuild_message(int status):
    if status == IX_OFFSET_NOT_INCREASING:
        return "offset-index entry not above the previous entry"
    if status == IX_OFFSET_OVERFLOW:
        return "offset minus base offset outside [0, 2147483647]"
    if status == IX_POSITION_OVERFLOW:
        return "byte position above 2147483647"
    if status == IX_OFFSET_INDEX_FULL:
        return "offset index full"
    if status == IX_TIME_INDEX_FULL:
        return "time index full"
    if status == IX_TIME_OFFSET_DECREASING:
        return "time-index offset below the previous entry's"
    return "batch size below the 12-byte log overhead"


def append_status_message(int status):
    """Words for an IX status of `_append_entry` / `_maybe_append_entry` and friends."""
    if status == IX_TIME_DECREASING:
        return "timestamp below the last entry's"
    return _rebuild_message(status)


def status_error(int status, str message, *, file=None, position=None, offset=None):
    """The exception for an IX status other than IX_OK (the rebuild here, OffsetIndex.append
    and TimeIndex.maybe_append above), whatever message each caller gives. A full index is
    IndexFullError; a byte position or batch size no index field can hold is ValueError;
    every other refusal (ordering, an offset outside the int32 relative range) is
    InvalidOffsetError."""
    return error_for(_engine_status(status), message, position, offset, file)


cdef int _engine_status(int status) noexcept:
    """The engine status (status.pxd) an IX status is raised as."""
    if status == IX_OFFSET_INDEX_FULL or status == IX_TIME_INDEX_FULL:
        return ENG_ERR_INDEX_FULL
    if status == IX_POSITION_OVERFLOW or status == IX_SIZE_INVALID:
        return ENG_ERR_ARGUMENT
    return ENG_ERR_INVALID_OFFSET


STATUS_OFFSET_NOT_INCREASING = IX_OFFSET_NOT_INCREASING
STATUS_OFFSET_OVERFLOW = IX_OFFSET_OVERFLOW
STATUS_POSITION_OVERFLOW = IX_POSITION_OVERFLOW
STATUS_OFFSET_INDEX_FULL = IX_OFFSET_INDEX_FULL
STATUS_TIME_INDEX_FULL = IX_TIME_INDEX_FULL
STATUS_TIME_OFFSET_DECREASING = IX_TIME_OFFSET_DECREASING
STATUS_TIME_DECREASING = IX_TIME_DECREASING


def rebuild_entries(const int64_t[::1] sizes, const int64_t[::1] last_offsets,
                    const int64_t[::1] max_timestamps, int64_t base_offset,
                    int64_t interval_bytes, Py_ssize_t max_offset_entries,
                    Py_ssize_t max_time_entries):
    """Index entries recovery would write for consecutive batches (see `ix_rebuild`).

    Args are contiguous int64 arrays of equal length, one item per batch in file order
    (`sizes` in bytes including the 12-byte log overhead). Positions are the running sum of
    sizes from 0, as in Kafka's recovery. Returns four int64 arrays: offset-index offsets and
    positions, time-index timestamps and offsets (absolute offsets). Runs without the GIL.

    Raises IndexFullError when an index would overflow its slots, InvalidOffsetError on
    non-increasing offsets or offsets/positions that do not fit Kafka's int32 fields, and
    ValueError on a size below 12; the error's `offset` is the batch's last offset and its
    `position` the batch's byte position.
    """
    cdef ptrdiff_t n = sizes.shape[0], n_offset = 0, n_time = 0, failed = -1
    cdef int status
    if last_offsets.shape[0] != n or max_timestamps.shape[0] != n:
        raise ValueError(f"header arrays differ in length: {n}, {last_offsets.shape[0]}, "
                         f"{max_timestamps.shape[0]}")
    if max_offset_entries < 0 or max_time_entries < 1:
        raise ValueError(f"entry limits must be >= 0 and >= 1, got {max_offset_entries} and "
                         f"{max_time_entries}")
    offset_keys = np.empty(n + 1, dtype=np.int64)
    offset_positions = np.empty(n + 1, dtype=np.int64)
    time_keys = np.empty(n + 1, dtype=np.int64)
    time_offsets = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] ok = offset_keys, op = offset_positions, tk = time_keys, to = time_offsets
    with nogil:
        status = ix_rebuild(&sizes[0] if n else NULL, &last_offsets[0] if n else NULL,
                            &max_timestamps[0] if n else NULL, n, base_offset, interval_bytes,
                            max_offset_entries, max_time_entries, &ok[0], &op[0], &n_offset,
                            &tk[0], &to[0], &n_time, &failed)
    if status != IX_OK:
        _raise_rebuild(status, failed, sizes, last_offsets, base_offset)
    return (offset_keys[:n_offset], offset_positions[:n_offset], time_keys[:n_time],
            time_offsets[:n_time])


cdef _raise_rebuild(int status, ptrdiff_t failed, const int64_t[::1] sizes,
                    const int64_t[::1] last_offsets, int64_t base_offset):
    n = sizes.shape[0]
    batch = min(failed, n - 1) if n else 0
    position = int(np.asarray(sizes[:batch]).sum()) if n else 0
    offset = last_offsets[batch] if n else None
    message = f"cannot rebuild index at batch {failed}: {_rebuild_message(status)}" + \
              f" (base offset {base_offset})"
    if status == IX_SIZE_INVALID:
        message = f"{message}: size {sizes[batch]} at position {position}"
    raise status_error(status, message, position=position, offset=offset)
