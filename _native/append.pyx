# distutils: sources = [_native/src/append.c, _native/src/batch.c, _native/src/crc32c.c]
# cython: language_level=3
"""Leader appends over scan rows: checked scans, offset assignment, stamped writes."""

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc

from batch cimport eng_batch_header
from engine._native.errors cimport raise_status
from engine._native.scan cimport BufferView, _HEADER_DESCR, _view
from status cimport ENG_ERR_ARGUMENT, ENG_ERR_INVALID, ENG_ERR_OS

from engine._native.scan import BATCH_HEADER_DTYPE, scan

cnp.import_array()


cdef extern from "append.h" nogil:
    enum:
        ENG_ASSIGN_OK
        ENG_ASSIGN_NOT_V2
        ENG_ASSIGN_BAD_DELTA
        ENG_ASSIGN_OVERFLOW
        ENG_PWRITE_NOT_TILED
    int eng_assign_offsets(eng_batch_header *rows, size_t n, int64_t next_offset,
                           int32_t epoch, int64_t *next, size_t *failed)
    int eng_pwrite_batches(int fd, const uint8_t *buf, size_t len,
                           const eng_batch_header *rows, size_t n, int64_t position,
                           size_t *written)


cdef int _check_rows(cnp.ndarray headers, bint writable) except -1:
    # C-level checks: these run on every append, where Python attribute lookups would cost
    # more than the work itself
    if <void *>cnp.PyArray_DESCR(headers) != <void *>_HEADER_DESCR \
            and headers.dtype != BATCH_HEADER_DTYPE:
        raise TypeError("headers must be a C-contiguous BATCH_HEADER_DTYPE array from scan()")
    if cnp.PyArray_NDIM(headers) != 1:
        raise TypeError("headers must be one-dimensional")
    if not cnp.PyArray_IS_C_CONTIGUOUS(headers):
        raise TypeError("headers must be a C-contiguous BATCH_HEADER_DTYPE array from scan()")
    if writable and not cnp.PyArray_ISWRITEABLE(headers):
        raise ValueError("headers must be writable")
    return 0


def scan_for_append(object data):
    """`scan(data, True)` plus the first row an append must refuse: (headers, valid_bytes,
    bad_row), where bad_row is the first entry that is not a v2 batch or whose CRC does not
    match, or -1. One pass; the GIL is released."""
    headers, valid = scan(data, True)
    cdef const eng_batch_header *rows = <const eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef Py_ssize_t i, n = headers.shape[0], bad = -1
    for i in range(n):
        if rows[i].magic != 2 or not rows[i].crc_valid:
            bad = i
            break
    return headers, valid, bad


def assign_offsets(cnp.ndarray headers, int64_t next_offset, int32_t leader_epoch):
    """Gives the rows of a scan consecutive offsets from `next_offset` (each batch keeps its
    offset span) and `leader_epoch`, in place: the leader's offset assignment. The bytes are
    not touched (`write_batches` writes the rows' values). Returns (first offset, last offset).

    Raises InvalidRecordError naming the batch position (nothing changed) for a row that is
    not a v2 batch, a batch whose last offset delta is negative or above 2**31 - 1, or offsets
    that would pass 2**63 - 1; ValueError for an empty array or a negative next_offset.
    """
    _check_rows(headers, True)
    cdef eng_batch_header *rows = <eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef size_t n = headers.shape[0], failed = 0
    cdef int64_t nxt = 0
    cdef int status
    if n == 0:
        raise ValueError("no batches to assign offsets to")
    if next_offset < 0:
        raise ValueError(f"next offset must be >= 0, got {next_offset}")
    status = eng_assign_offsets(rows, n, next_offset, leader_epoch, &nxt, &failed)
    if status != ENG_ASSIGN_OK:
        row = &rows[failed]
        if status == ENG_ASSIGN_NOT_V2:
            why = f"has magic v{row.magic}: only v2 batches get offsets assigned"
        elif status == ENG_ASSIGN_BAD_DELTA:
            why = (f"has offsets {row.base_offset}..{row.last_offset}: the last offset delta "
                   f"must lie in [0, 2147483647]")
        else:
            why = f"would get offsets beyond 2**63 - 1 (next offset {next_offset})"
        raise_status(ENG_ERR_INVALID, f"batch at byte {row.position} {why}",
                     position=row.position, offset=row.base_offset)
    return rows[0].base_offset, nxt - 1


def append_summary(cnp.ndarray headers):
    """What an append needs from its scan rows, in one call: (first offset, last offset,
    max timestamp, last offset of the first batch holding it, first batch's max timestamp,
    bytes). ValueError for an empty array."""
    _check_rows(headers, False)
    cdef const eng_batch_header *rows = <const eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef Py_ssize_t i, n = headers.shape[0], best = 0
    cdef int64_t total = 0
    if n == 0:
        raise ValueError("no batches to summarize")
    for i in range(n):
        total += rows[i].size
        if rows[i].max_timestamp > rows[best].max_timestamp:
            best = i
    return (rows[0].base_offset, rows[n - 1].last_offset, rows[best].max_timestamp,
            rows[best].last_offset, rows[0].max_timestamp, total)


def write_batches(int fd, object data, cnp.ndarray headers, int64_t position):
    """Writes `data` (whole batches, tiled exactly by the scan rows `headers`) at byte
    `position` of file descriptor `fd`, each v2 batch with the base offset and partition
    leader epoch of its row (see `assign_offsets`; fields outside the CRC, so the batch stays
    valid). One pwritev per 256 batches, no copy of the data; short writes and EINTR are
    retried; the GIL is released. Returns the bytes written.

    Raises ValueError when the rows do not tile `data`, OSError when the write fails (bytes
    after `position` may then have been written: the caller truncates them).
    """
    _check_rows(headers, False)
    cdef BufferView v = _view(data)
    cdef const eng_batch_header *rows = <const eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef size_t n = headers.shape[0], written = 0
    cdef int rc
    with nogil:
        rc = eng_pwrite_batches(fd, v.ptr, v.nbytes, rows, n, position, &written)
    if rc == ENG_PWRITE_NOT_TILED:
        why = (f"file position must be >= 0, got {position}" if position < 0
               else f"headers do not tile the {v.nbytes}-byte buffer exactly")
        raise_status(ENG_ERR_ARGUMENT, why)
    if rc != 0:
        raise_status(ENG_ERR_OS, None, None, None, None, rc)
    return written


def epoch_rises(cnp.ndarray headers, int64_t latest_epoch):
    """The (partition leader epoch, base offset) pairs that Kafka's leader-epoch cache takes
    from these rows in order: v2 batches whose epoch (>= 0) is above `latest_epoch` (-1 when
    the cache is empty) and above every epoch taken before. Usually an empty list: only the
    rows where the epoch rises matter, so recovery and appends skip the rest in native code.
    """
    _check_rows(headers, False)
    cdef const eng_batch_header *rows = <const eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef Py_ssize_t i, k = 0, n = headers.shape[0]
    cdef int64_t top = latest_epoch
    cdef Py_ssize_t *hits = <Py_ssize_t *>malloc((n if n else 1) * sizeof(Py_ssize_t))
    if hits == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                if rows[i].magic >= 2 and rows[i].partition_leader_epoch >= 0 \
                        and rows[i].partition_leader_epoch > top:
                    top = rows[i].partition_leader_epoch
                    hits[k] = i
                    k += 1
        return [(rows[hits[i]].partition_leader_epoch, rows[hits[i]].base_offset)
                for i in range(k)]
    finally:
        free(hits)
