# distutils: sources = [_native/src/bigbuf.c, _native/src/crc32c.c]
# cython: language_level=3
"""The column buffers of the columnar decode and the appends that fill them.

A ColumnSet is the growing Arrow-layout buffers of one decode (the layout is described in
columnar.pyx); the appends here take one parsed v2 batch (record views into its section)
or one legacy Record and add its records as copies or as Arrow binary views, and the
results hand the buffers to numpy arrays without copying. Which batches are decoded, their
parse, decompression and CRC checks are the walk's (engine._native.columnar); everything
per record happens here, in one compilation unit, so the per-record helpers inline into
the loop of `_append_v2`.
"""

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from batch cimport (
    ENG_RECORD_BATCH_OVERHEAD,
    eng_batch_header,
    eng_header_view,
    eng_parse_headers,
    eng_prefetch,
    eng_record_view,
)
from checksums cimport eng_crc32c
from engine._native.decode cimport Record, _record_timestamp, _wrap_add
from engine._native.errors cimport raise_status
from status cimport ENG_ERR_CORRUPT, ENG_ERR_LIMIT, ENG_ERR_NOMEM, ENG_OK

import numpy as np

cnp.import_array()


cdef extern from "bigbuf.h" nogil:
    void *eng_big_alloc(size_t *cap)
    void *eng_big_realloc(void *p, size_t old_cap, size_t *cap)
    void eng_big_free(void *p, size_t cap)


cdef int gb_reserve(GrowBuf *g, size_t extra) noexcept nogil:
    """Room for `extra` more bytes: ENG_OK or ENG_ERR_NOMEM."""
    cdef size_t want = g.len + extra, cap
    cdef uint8_t *p
    if want <= g.cap:
        return ENG_OK
    cap = g.cap * 2 if g.cap else 4096
    while cap < want:
        cap *= 2
    p = <uint8_t *>eng_big_realloc(g.data, g.cap, &cap)
    if p == NULL:
        return ENG_ERR_NOMEM
    g.data = p
    g.cap = cap
    return ENG_OK


cdef inline void _put_i64(GrowBuf *g, int64_t v) noexcept nogil:
    memcpy(g.data + g.len, &v, 8)
    g.len += 8


cdef inline void _put_i32(GrowBuf *g, int32_t v) noexcept nogil:
    memcpy(g.data + g.len, &v, 4)
    g.len += 4


cdef inline int _reserve_bits(GrowBuf *g, int64_t bits) noexcept nogil:
    cdef size_t need = <size_t>((bits + 7) >> 3)
    if need > g.len:
        if gb_reserve(g, need - g.len) != ENG_OK:
            return ENG_ERR_NOMEM
        memset(g.data + g.len, 0, need - g.len)
        g.len = need
    return ENG_OK


cdef inline void _set_bit(GrowBuf *g, int64_t i) noexcept nogil:
    g.data[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef int _columns_init(ColumnSet *c) noexcept nogil:
    memset(c, 0, sizeof(ColumnSet))
    if (gb_reserve(&c.key_off, 4) or gb_reserve(&c.val_off, 4) or gb_reserve(&c.hdr_off, 4)
            or gb_reserve(&c.hk_off, 4) or gb_reserve(&c.hv_off, 4)):
        return ENG_ERR_NOMEM
    _put_i32(&c.key_off, 0)
    _put_i32(&c.val_off, 0)
    _put_i32(&c.hdr_off, 0)
    _put_i32(&c.hk_off, 0)
    _put_i32(&c.hv_off, 0)
    return ENG_OK


cdef inline void _gb_free(GrowBuf *g) noexcept nogil:
    eng_big_free(g.data, g.cap)
    g.data = NULL
    g.cap = g.len = 0


cdef void _columns_free(ColumnSet *c) noexcept nogil:
    _gb_free(&c.offset)
    _gb_free(&c.timestamp)
    _gb_free(&c.ts_type)
    _gb_free(&c.batch_index)
    _gb_free(&c.key_off)
    _gb_free(&c.key_data)
    _gb_free(&c.key_valid)
    _gb_free(&c.val_off)
    _gb_free(&c.val_data)
    _gb_free(&c.val_valid)
    _gb_free(&c.hdr_off)
    _gb_free(&c.hk_off)
    _gb_free(&c.hk_data)
    _gb_free(&c.hv_off)
    _gb_free(&c.hv_data)
    _gb_free(&c.hv_valid)


cdef inline void _small_copy(uint8_t *dst, const uint8_t *src, size_t n) noexcept nogil:
    """memcpy for the few-byte keys and headers that most records carry: two overlapping
    fixed-size moves instead of a call into libc per value."""
    if n > 16:
        memcpy(dst, src, n)
    elif n >= 8:
        memcpy(dst, src, 8)
        memcpy(dst + n - 8, src + n - 8, 8)
    elif n >= 4:
        memcpy(dst, src, 4)
        memcpy(dst + n - 4, src + n - 4, 4)
    elif n > 0:
        dst[0] = src[0]
        dst[n >> 1] = src[n >> 1]
        dst[n - 1] = src[n - 1]


# ---- per-record columns, shared by both decodes ---------------------------------------------

cdef inline int _reserve_meta(ColumnSet *c, size_t count) noexcept nogil:
    if (gb_reserve(&c.offset, 8 * count) or gb_reserve(&c.timestamp, 8 * count)
            or gb_reserve(&c.ts_type, count) or gb_reserve(&c.batch_index, 4 * count)):
        return ENG_ERR_NOMEM
    return ENG_OK


cdef inline void _put_meta(ColumnSet *c, int64_t offset, int64_t timestamp, int8_t ts_type,
                           int32_t batch_index) noexcept nogil:
    """The columns every record has (space reserved by `_reserve_meta`)."""
    _put_i64(&c.offset, offset)
    _put_i64(&c.timestamp, timestamp)
    c.ts_type.data[c.ts_type.len] = <uint8_t>ts_type
    c.ts_type.len += 1
    _put_i32(&c.batch_index, batch_index)


# ---- the CRC, fused with the copies -------------------------------------------------------
#
# A batch's CRC-32C covers every byte from its attributes on, and the copying decode reads
# every value byte again to copy it. Checksummed a block at a time just ahead of the copies,
# the bytes are still in L1 when copied: one pass over the batch instead of two.

cdef size_t _CRC_BLOCK = 8192  # well within L1 with the copies' own lines


cdef inline void _crc_through(CrcCursor *k, const uint8_t *p) noexcept nogil:
    """Checksums up to `p` at least (a block at a time, the batch's end at most)."""
    cdef const uint8_t *to
    if p <= k.at:
        return
    to = k.at + _CRC_BLOCK
    if to < p:
        to = p
    if to > k.end:
        to = k.end
    k.crc = eng_crc32c(k.crc, k.at, <size_t>(to - k.at))
    k.at = to


# ---- copies: keys, values and headers as Arrow binary columns ------------------------------

cdef inline int _append_binary(GrowBuf *offs, GrowBuf *data, GrowBuf *valid, int64_t index,
                               int64_t *nulls, const uint8_t *src, int32_t length) noexcept nogil:
    """Appends one nullable binary value: ENG_OK, or ENG_ERR_LIMIT past Arrow's int32
    offsets (space reserved by the caller)."""
    if length < 0:
        nulls[0] += 1
    else:
        if data.len + <size_t>length > _INT32_LIMIT:
            return ENG_ERR_LIMIT
        if length:  # an empty value may come with no buffer yet (NULL): memcpy wants neither
            _small_copy(data.data + data.len, src, length)
        data.len += length
        _set_bit(valid, index)
    _put_i32(offs, <int32_t>data.len)
    return ENG_OK


cdef int _reserve_copies(ColumnSet *c, const eng_record_view *views,
                         int32_t count) noexcept nogil:
    """Room for the key, value and header copies of `count` parsed records."""
    cdef size_t kbytes = 0, vbytes = 0, hbytes = 0, nh = 0
    cdef int32_t i
    for i in range(count):
        kbytes += views[i].key_len if views[i].key_len > 0 else 0
        vbytes += views[i].value_len if views[i].value_len > 0 else 0
        hbytes += views[i].headers_bytes
        nh += views[i].headers_count
    if c.keys and (gb_reserve(&c.key_off, 4 * count) or gb_reserve(&c.key_data, kbytes)
                   or _reserve_bits(&c.key_valid, c.n + count)):
        return ENG_ERR_NOMEM
    if c.values and (gb_reserve(&c.val_off, 4 * count) or gb_reserve(&c.val_data, vbytes)
                     or _reserve_bits(&c.val_valid, c.n + count)):
        return ENG_ERR_NOMEM
    if c.headers and (gb_reserve(&c.hdr_off, 4 * count) or gb_reserve(&c.hk_off, 4 * nh)
                      or gb_reserve(&c.hv_off, 4 * nh) or gb_reserve(&c.hk_data, hbytes)
                      or gb_reserve(&c.hv_data, hbytes)
                      or _reserve_bits(&c.hv_valid, c.nh + <int64_t>nh)):
        return ENG_ERR_NOMEM
    return ENG_OK


cdef inline int _copy_record(ColumnSet *c, const uint8_t *sec, const eng_record_view *r,
                             eng_header_view *hbuf) noexcept nogil:
    """Copies the key, value and headers of one record asked for: ENG_OK or ENG_ERR_LIMIT."""
    cdef int rc = ENG_OK
    if c.keys:
        rc = _append_binary(&c.key_off, &c.key_data, &c.key_valid, c.n, &c.key_nulls,
                            sec + r.key_off, r.key_len)
    if rc == ENG_OK and c.values:
        rc = _append_binary(&c.val_off, &c.val_data, &c.val_valid, c.n, &c.val_nulls,
                            sec + r.value_off, r.value_len)
    if rc == ENG_OK and c.headers:
        if r.headers_count:
            rc = _copy_headers(c, sec, r, hbuf)
        _put_i32(&c.hdr_off, <int32_t>c.nh)
    return rc


cdef int _copy_headers(ColumnSet *c, const uint8_t *sec, const eng_record_view *r,
                       eng_header_view *hbuf) noexcept nogil:
    """Appends one record's headers (space reserved by the caller): ENG_OK or ENG_ERR_LIMIT."""
    cdef int32_t j
    cdef int rc
    eng_parse_headers(sec, r, hbuf)
    for j in range(r.headers_count):
        if c.hk_data.len + <size_t>hbuf[j].key_len > _INT32_LIMIT:
            return ENG_ERR_LIMIT
        _small_copy(c.hk_data.data + c.hk_data.len, sec + hbuf[j].key_off, hbuf[j].key_len)
        c.hk_data.len += hbuf[j].key_len
        _put_i32(&c.hk_off, <int32_t>c.hk_data.len)
        rc = _append_binary(&c.hv_off, &c.hv_data, &c.hv_valid, c.nh, &c.hv_nulls,
                            sec + hbuf[j].value_off, hbuf[j].value_len)
        if rc != ENG_OK:
            return rc
        c.nh += 1
    return ENG_OK


cdef int _copy_py_value(GrowBuf *offs, GrowBuf *data, GrowBuf *valid, int64_t index,
                        int64_t *nulls, object value) except -1:
    """A legacy record's key or value, copied (with the GIL)."""
    cdef const uint8_t[::1] mv
    cdef int rc
    if value is None:
        rc = _append_binary(offs, data, valid, index, nulls, NULL, -1)
    else:
        mv = value
        if gb_reserve(data, mv.shape[0]) != ENG_OK:
            raise MemoryError()
        rc = _append_binary(offs, data, valid, index, nulls,
                            &mv[0] if mv.shape[0] else NULL, <int32_t>mv.shape[0])
    if rc != ENG_OK:
        raise_status(rc, "Decoded keys or values exceed 2 GiB: decode a smaller range")
    return 0


# ---- views: keys and values as Arrow binary views into the source -------------------------
#
# Arrow's BinaryView layout, 16 bytes a value: int32 length, then for up to 12 bytes the value
# itself (zero-padded), else a 4-byte prefix, int32 buffer index and int32 offset into that
# buffer. Keys, values, header keys and header values of uncompressed batches point into the
# source buffer (buffer 0), those of a compressed batch into its decompressed section (the
# sections lie in a few big blocks, one buffer each, kept alive by the arrays), so nothing is
# copied but values of 12 bytes or less and legacy (magic 0/1) records, which are copied into
# one buffer of their own.

cdef inline void _put_view(GrowBuf *g, const uint8_t *src, int32_t length, int32_t buffer,
                           int64_t offset) noexcept nogil:
    cdef uint8_t *v = g.data + g.len
    cdef int32_t at = <int32_t>offset  # (checked to fit int32)
    memset(v, 0, 16)
    memcpy(v, &length, 4)
    if length <= 12:
        _small_copy(v + 4, src, length)
    else:
        memcpy(v + 4, src, 4)
        memcpy(v + 8, &buffer, 4)
        memcpy(v + 12, &at, 4)
    g.len += 16


cdef inline void _view_value(GrowBuf *views, GrowBuf *valid, int64_t index, int64_t *nulls,
                             const uint8_t *sec, int32_t off, int32_t length, int32_t buffer,
                             int64_t base) noexcept nogil:
    if length < 0:
        nulls[0] += 1
        _put_view(views, NULL, 0, 0, 0)
    else:
        _put_view(views, sec + off, length, buffer, base + off)
        _set_bit(valid, index)


cdef int _reserve_views(ColumnSet *c, const eng_record_view *views,
                        int32_t count) noexcept nogil:
    """Room for the key, value and header views of `count` parsed records."""
    cdef size_t nh = 0
    cdef int32_t i
    for i in range(count):
        nh += views[i].headers_count
    if (gb_reserve(&c.hdr_off, 4 * count) or gb_reserve(&c.key_data, 16 * count)
            or gb_reserve(&c.val_data, 16 * count) or gb_reserve(&c.hk_data, 16 * nh)
            or gb_reserve(&c.hv_data, 16 * nh)
            or _reserve_bits(&c.key_valid, c.n + count) or _reserve_bits(&c.val_valid, c.n + count)
            or _reserve_bits(&c.hv_valid, c.nh + <int64_t>nh)):
        return ENG_ERR_NOMEM
    return ENG_OK


cdef inline void _view_record(ColumnSet *c, const uint8_t *sec, const eng_record_view *r,
                              eng_header_view *hbuf, int32_t buffer, int64_t base) noexcept nogil:
    """Views of one record's key, value and headers into buffer `buffer`, whose byte `base`
    is the section's first: no byte is copied beyond the 12 that a view inlines."""
    cdef int32_t j
    _view_value(&c.key_data, &c.key_valid, c.n, &c.key_nulls, sec, r.key_off, r.key_len,
                buffer, base)
    _view_value(&c.val_data, &c.val_valid, c.n, &c.val_nulls, sec, r.value_off, r.value_len,
                buffer, base)
    if r.headers_count:
        eng_parse_headers(sec, r, hbuf)
        for j in range(r.headers_count):
            _put_view(&c.hk_data, sec + hbuf[j].key_off, hbuf[j].key_len, buffer,
                      base + hbuf[j].key_off)
            _view_value(&c.hv_data, &c.hv_valid, c.nh, &c.hv_nulls, sec, hbuf[j].value_off,
                        hbuf[j].value_len, buffer, base)
            c.nh += 1
    _put_i32(&c.hdr_off, <int32_t>c.nh)


cdef int _view_py_value(GrowBuf *views, GrowBuf *valid, int64_t index, int64_t *nulls,
                        object value, bytearray arena, int32_t buffer) except -1:
    """A legacy record's key or value: copied to the end of `arena` (buffer `buffer`)."""
    cdef const uint8_t[::1] mv
    cdef Py_ssize_t at = len(arena)
    if gb_reserve(views, 16) != ENG_OK:
        raise MemoryError()
    if value is None:
        _view_value(views, valid, index, nulls, NULL, 0, -1, 0, 0)
        return 0
    if at + len(value) > <Py_ssize_t>_INT32_LIMIT:
        raise_status(ENG_ERR_LIMIT, "Legacy keys or values exceed 2 GiB: decode a smaller range")
    arena += value
    mv = arena
    _view_value(views, valid, index, nulls, &mv[0], <int32_t>at, <int32_t>len(value), buffer,
                0)
    return 0


# ---- one batch, one record: both decodes ------------------------------------------------------

cdef int _append_v2(ColumnSet *c, const uint8_t *sec, size_t sec_len,
                    const eng_record_view *views, const eng_batch_header *h,
                    int32_t batch_index, int64_t min_offset, int64_t max_offset,
                    eng_header_view *hbuf, int32_t buffer, int64_t base,
                    CrcCursor *crc, const uint8_t *ahead, size_t ahead_len) noexcept nogil:
    """Appends the records of one parsed v2 batch whose offsets lie in [min_offset,
    max_offset): copies, or with `c.as_views` views into buffer `buffer` whose byte `base` is
    the section's first. With `crc` (an uncompressed batch's cursor), each record is
    checksummed just before it is copied and the whole batch by the end. Returns ENG_OK,
    ENG_ERR_NOMEM, ENG_ERR_LIMIT (past Arrow's int32 offsets) or ENG_ERR_CORRUPT (the CRC
    does not match). [ahead, ahead + ahead_len) (the next batch) is prefetched a slice a
    record, so it streams in while this batch is decoded."""
    cdef int32_t i, count = h.record_count
    cdef size_t slice = (ahead_len + <size_t>count - 1) // <size_t>count if count > 0 else 0
    cdef const eng_record_view *r
    cdef int64_t off
    cdef int rc = _reserve_meta(c, count)
    if rc == ENG_OK:
        rc = _reserve_views(c, views, count) if c.as_views else _reserve_copies(c, views, count)
    if rc != ENG_OK:
        return rc
    if count <= 0:
        eng_prefetch(ahead, ahead_len)
    for i in range(count):
        r = &views[i]
        if <size_t>i * slice < ahead_len:
            eng_prefetch(ahead + <size_t>i * slice, min(slice, ahead_len - <size_t>i * slice))
        if crc != NULL:  # through this record's end: the next one's key lies past it
            _crc_through(crc, sec + (views[i + 1].key_off if i + 1 < count else sec_len))
        off = _wrap_add(h.base_offset, r.offset_delta)
        if _left_out(off, min_offset, max_offset):
            continue
        _put_meta(c, off, _record_timestamp(h, r.timestamp_delta), h.timestamp_type,
                  batch_index)
        if c.as_views:
            _view_record(c, sec, r, hbuf, buffer, base)
        else:
            rc = _copy_record(c, sec, r, hbuf)
            if rc != ENG_OK:
                return rc
        c.n += 1
    if crc != NULL:
        _crc_through(crc, crc.end)
        if crc.crc != h.crc:
            return ENG_ERR_CORRUPT
    return ENG_OK


cdef int _append_record(ColumnSet *c, Record rec, int32_t batch_index, bytearray arena,
                        int32_t buffer) except -1:
    """Appends one decoded legacy Record (with the GIL): copies of its key and value, or with
    `c.as_views` views of their copies at the end of `arena` (buffer `buffer`)."""
    if (_reserve_meta(c, 1) or gb_reserve(&c.key_off, 4) or gb_reserve(&c.val_off, 4)
            or gb_reserve(&c.hdr_off, 4)
            or _reserve_bits(&c.key_valid, c.n + 1) or _reserve_bits(&c.val_valid, c.n + 1)):
        raise MemoryError()
    _put_meta(c, rec.offset, rec.timestamp, rec._timestamp_type, batch_index)
    if c.as_views:
        _view_py_value(&c.key_data, &c.key_valid, c.n, &c.key_nulls, rec.key, arena, buffer)
        _view_py_value(&c.val_data, &c.val_valid, c.n, &c.val_nulls, rec.value, arena, buffer)
    else:
        if c.keys:
            _copy_py_value(&c.key_off, &c.key_data, &c.key_valid, c.n, &c.key_nulls, rec.key)
        if c.values:
            _copy_py_value(&c.val_off, &c.val_data, &c.val_valid, c.n, &c.val_nulls,
                           rec.value)
    if c.headers:
        _put_i32(&c.hdr_off, <int32_t>c.nh)
    c.n += 1
    return 0


cdef int _reserve_range(ColumnSet *c, const eng_batch_header *rows, Py_ssize_t start,
                        Py_ssize_t stop) noexcept nogil:
    """Sizes the buffers once for the range, so growth (and its page faults) is rare."""
    cdef size_t records = 0, raw = 0
    cdef Py_ssize_t i
    cdef size_t section
    for i in range(start, stop):
        # counts are untrusted until parsed: reserve only what the bytes could hold
        if rows[i].magic == 2 and rows[i].record_count > 0:
            section = <size_t>(rows[i].size - ENG_RECORD_BATCH_OVERHEAD)
            if rows[i].compression != 0:
                # a guess (typical ratios are 2-4x): growing by mremap later costs more
                # than address space reserved now and never touched
                section *= 4
            if <size_t>rows[i].record_count <= section // 7:
                records += <size_t>rows[i].record_count
                raw += section
    if _reserve_meta(c, records) != ENG_OK:
        return ENG_ERR_NOMEM
    if c.as_views:
        if (gb_reserve(&c.key_data, 16 * records) or gb_reserve(&c.val_data, 16 * records)
                # a header a record, as most topics with headers carry (more grow the buffers)
                or gb_reserve(&c.hk_data, 16 * records) or gb_reserve(&c.hv_data, 16 * records)
                or gb_reserve(&c.hdr_off, 4 * records)):
            return ENG_ERR_NOMEM
    elif ((c.keys and gb_reserve(&c.key_off, 4 * records))
            or (c.values and (gb_reserve(&c.val_off, 4 * records)
                              or gb_reserve(&c.val_data, raw)))
            or (c.headers and gb_reserve(&c.hdr_off, 4 * records))):
        return ENG_ERR_NOMEM
    return ENG_OK


# ---- results --------------------------------------------------------------------------------

cdef struct _Owned:
    void *data
    size_t cap


cdef void _free_capsule(object capsule) noexcept:
    cdef _Owned *owned = <_Owned *>PyCapsule_GetPointer(capsule, NULL)
    eng_big_free(owned.data, owned.cap)
    free(owned)


cdef object _take_array(GrowBuf *g, object dtype, Py_ssize_t count):
    """Hands a buffer to a numpy array that frees it when collected."""
    cdef cnp.npy_intp dims[1]
    cdef _Owned *owned
    if g.data == NULL:
        return np.zeros(count, dtype=dtype)
    owned = <_Owned *>malloc(sizeof(_Owned))
    if owned == NULL:
        raise MemoryError()
    owned.data = g.data
    owned.cap = g.cap
    g.data = NULL
    g.cap = 0
    capsule = PyCapsule_New(owned, NULL, _free_capsule)
    dims[0] = count
    arr = cnp.PyArray_SimpleNewFromData(1, dims, cnp.dtype(dtype).num, owned.data)
    cnp.set_array_base(arr, capsule)
    return arr


cdef dict _meta_columns(ColumnSet *c):
    cdef Py_ssize_t n = c.n
    return {
        "num_records": c.n,
        "num_headers": c.nh,
        "offset": _take_array(&c.offset, np.int64, n),
        "timestamp": _take_array(&c.timestamp, np.int64, n),
        "timestamp_type": _take_array(&c.ts_type, np.int8, n),
        "batch_index": _take_array(&c.batch_index, np.int32, n),
    }


cdef dict _copied_columns(ColumnSet *c):
    cdef Py_ssize_t n = c.n, nh = c.nh
    cdef dict out = _meta_columns(c)
    if c.keys:
        out["key_offsets"] = _take_array(&c.key_off, np.int32, n + 1)
        out["key_data"] = _take_array(&c.key_data, np.uint8, c.key_data.len)
        out["key_validity"] = _take_array(&c.key_valid, np.uint8, (n + 7) // 8)
        out["key_null_count"] = c.key_nulls
    if c.values:
        out["value_offsets"] = _take_array(&c.val_off, np.int32, n + 1)
        out["value_data"] = _take_array(&c.val_data, np.uint8, c.val_data.len)
        out["value_validity"] = _take_array(&c.val_valid, np.uint8, (n + 7) // 8)
        out["value_null_count"] = c.val_nulls
    if c.headers:
        out["header_offsets"] = _take_array(&c.hdr_off, np.int32, n + 1)
        out["header_key_offsets"] = _take_array(&c.hk_off, np.int32, nh + 1)
        out["header_key_data"] = _take_array(&c.hk_data, np.uint8, c.hk_data.len)
        out["header_value_offsets"] = _take_array(&c.hv_off, np.int32, nh + 1)
        out["header_value_data"] = _take_array(&c.hv_data, np.uint8, c.hv_data.len)
        out["header_value_validity"] = _take_array(&c.hv_valid, np.uint8, (nh + 7) // 8)
        out["header_value_null_count"] = c.hv_nulls
    return out


cdef dict _view_columns(ColumnSet *c, list buffers):
    cdef Py_ssize_t n = c.n, nh = c.nh
    cdef dict out = _meta_columns(c)
    out.update({
        "buffers": buffers,
        "key_views": _take_array(&c.key_data, np.uint8, 16 * n),
        "key_validity": _take_array(&c.key_valid, np.uint8, (n + 7) // 8),
        "key_null_count": c.key_nulls,
        "value_views": _take_array(&c.val_data, np.uint8, 16 * n),
        "value_validity": _take_array(&c.val_valid, np.uint8, (n + 7) // 8),
        "value_null_count": c.val_nulls,
        "header_offsets": _take_array(&c.hdr_off, np.int32, n + 1),
        "header_key_views": _take_array(&c.hk_data, np.uint8, 16 * nh),
        "header_key_null_count": 0,
        "header_value_views": _take_array(&c.hv_data, np.uint8, 16 * nh),
        "header_value_validity": _take_array(&c.hv_valid, np.uint8, (nh + 7) // 8),
        "header_value_null_count": c.hv_nulls,
    })
    return out
