# Shared declarations of engine._native.columns: the Arrow-layout column buffers that the
# columnar decode (engine._native.columnar) walks a range of batches into.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from batch cimport eng_batch_header, eng_header_view, eng_record_view
from engine._native.decode cimport Record


cdef enum:
    # Arrow's binary offsets and view offsets are int32: no column or buffer goes past this
    _INT32_LIMIT = 0x7FFFFFFF


cdef struct GrowBuf:
    uint8_t *data
    size_t len
    size_t cap


cdef struct ColumnSet:
    GrowBuf offset, timestamp, ts_type, batch_index
    GrowBuf key_off, key_data, key_valid
    GrowBuf val_off, val_data, val_valid
    GrowBuf hdr_off, hk_off, hk_data, hv_off, hv_data, hv_valid
    int64_t n, nh, key_nulls, val_nulls, hv_nulls
    bint keys, values, headers  # the columns asked for
    # key_data, val_data, hk_data and hv_data hold 16-byte Arrow views, not bytes (the
    # *_off buffers then stay unused)
    bint as_views


# An uncompressed v2 batch's CRC-32C, computed while its records are copied (see columns.pyx)
cdef struct CrcCursor:
    const uint8_t *at   # the next byte to checksum
    const uint8_t *end  # the batch's end
    uint32_t crc


cdef inline bint _left_out(int64_t offset, int64_t min_offset, int64_t max_offset) noexcept nogil:
    """Whether a record's offset lies outside [min_offset, max_offset) (-1: unbounded)."""
    return offset < min_offset or (max_offset >= 0 and offset >= max_offset)


cdef int gb_reserve(GrowBuf *g, size_t extra) noexcept nogil
cdef int _columns_init(ColumnSet *c) noexcept nogil
cdef void _columns_free(ColumnSet *c) noexcept nogil
cdef int _reserve_range(ColumnSet *c, const eng_batch_header *rows, Py_ssize_t start,
                        Py_ssize_t stop) noexcept nogil
cdef int _append_v2(ColumnSet *c, const uint8_t *sec, size_t sec_len,
                    const eng_record_view *views, const eng_batch_header *h,
                    int32_t batch_index, int64_t min_offset, int64_t max_offset,
                    eng_header_view *hbuf, int32_t buffer, int64_t base,
                    CrcCursor *crc, const uint8_t *ahead, size_t ahead_len) noexcept nogil
cdef int _append_record(ColumnSet *c, Record rec, int32_t batch_index, bytearray arena,
                        int32_t buffer) except -1
cdef object _take_array(GrowBuf *g, object dtype, Py_ssize_t count)
cdef dict _copied_columns(ColumnSet *c)
cdef dict _view_columns(ColumnSet *c, list buffers)
