# Shared declarations of engine._native.decode (the columnar decoder builds on these).
cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t

from batch cimport eng_batch_header, eng_record_view
from engine._native.codecs cimport Scratch
from engine._native.scan cimport BufferView


cdef class Record:
    # offset, timestamp (ints, made at decode), key, value and headers are exposed as
    # read-only member descriptors (set up in decode.pyx), which CPython's attribute
    # specialisation reads without a call
    cdef object offset
    cdef object timestamp
    cdef int8_t _timestamp_type
    cdef object key
    cdef object value
    cdef tuple headers
    cdef readonly int32_t sequence
    cdef readonly bint is_control

    cdef tuple _astuple(self)


cdef class RecordBatch:
    cdef readonly BufferView buffer
    cdef eng_batch_header h
    cdef bint crc_checked
    cdef readonly Py_ssize_t max_decompressed_bytes
    cdef object _legacy_base_offset


cdef inline int64_t _wrap_add(int64_t a, int64_t b) noexcept nogil:
    """a + b wrapping as Java's longs do (offsets and timestamps come from the data, so the
    sum may overflow: signed overflow is undefined in C, unsigned wraps)."""
    return <int64_t>(<uint64_t>a + <uint64_t>b)


cdef inline int64_t _wrap_sub(int64_t a, int64_t b) noexcept nogil:
    return <int64_t>(<uint64_t>a - <uint64_t>b)


cdef inline int64_t _record_timestamp(const eng_batch_header *h, int64_t delta) noexcept nogil:
    if h.timestamp_type == 1:
        return h.max_timestamp
    return _wrap_add(h.base_timestamp, delta)


cdef RecordBatch _make_batch(BufferView v, const eng_batch_header *h, bint crc_checked,
                             Py_ssize_t limit)
cdef int _check_headers(cnp.ndarray headers, BufferView v, Py_ssize_t start=*,
                        Py_ssize_t stop=*) except -1
cdef object _v2_section(RecordBatch b, const uint8_t **sec, size_t *sec_len,
                        Scratch scratch=*)
cdef int _parse_views(RecordBatch b, const uint8_t *sec, size_t sec_len,
                      eng_record_view *views) except -1
cdef eng_record_view *_alloc_views(RecordBatch b, size_t sec_len) except NULL
cdef list _legacy_records(RecordBatch b, object inner=*)
