# distutils: sources = [_native/src/batch.c, _native/src/bigbuf.c, _native/src/crc32c.c]
# cython: language_level=3
"""Columnar decode: a range of batches straight into Arrow-layout column buffers."""

# Layout of the result (all numpy arrays; the memory is allocated here and owned by them):
#   offset int64[n], timestamp int64[n], timestamp_type int8[n], batch_index int32[n]
#   key / value:   <name>_offsets int32[n+1], <name>_data uint8[...], <name>_validity uint8
#                  (Arrow's LSB-first bitmap, 1 = not null), <name>_null_count
#   headers:       header_offsets int32[n+1] (a list per record), header_key_offsets int32,
#                  header_key_data uint8 (UTF-8), header_value_offsets int32,
#                  header_value_data uint8, header_value_validity uint8 bitmap
# which is exactly what pyarrow's Array.from_buffers takes for binary, string and list
# arrays, so wrapping them copies nothing. A column not asked for (with_keys, with_values,
# with_headers) has no entries: its bytes are neither reserved nor copied, and the parse
# steps over them (headers are not even split into keys and values).

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_New
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from batch cimport *
from engine._native.codecs cimport Scratch, give_scratch, take_scratch
from engine._native.decode cimport (
    Record,
    RecordBatch,
    _alloc_views,
    _check_headers,
    _legacy_records,
    _make_batch,
    _parse_views,
    _record_timestamp,
    _v2_section,
    _wrap_add,
)
from engine._native.scan cimport BufferView, _view

import numpy as np

from engine._native.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES
from engine._native.errors import RecordSizeLimitError
from engine._native.scan import scan

cnp.import_array()

cdef size_t _INT32_LIMIT = 0x7FFFFFFF


cdef struct GrowBuf:
    uint8_t *data
    size_t len
    size_t cap


cdef extern from "bigbuf.h" nogil:
    void *eng_big_alloc(size_t *cap)
    void *eng_big_realloc(void *p, size_t old_cap, size_t *cap)
    void eng_big_free(void *p, size_t cap)


cdef int gb_reserve(GrowBuf *g, size_t extra) noexcept nogil:
    cdef size_t want = g.len + extra, cap
    cdef uint8_t *p
    if want <= g.cap:
        return 0
    cap = g.cap * 2 if g.cap else 4096
    while cap < want:
        cap *= 2
    p = <uint8_t *>eng_big_realloc(g.data, g.cap, &cap)
    if p == NULL:
        return -1
    g.data = p
    g.cap = cap
    return 0


cdef struct ColumnSet:
    GrowBuf offset, timestamp, ts_type, batch_index
    GrowBuf key_off, key_data, key_valid
    GrowBuf val_off, val_data, val_valid
    GrowBuf hdr_off, hk_off, hk_data, hv_off, hv_data, hv_valid
    int64_t n, nh, key_nulls, val_nulls, hv_nulls
    bint keys, values, headers  # the columns asked for


cdef inline void _put_i64(GrowBuf *g, int64_t v) noexcept nogil:
    memcpy(g.data + g.len, &v, 8)
    g.len += 8


cdef inline void _put_i32(GrowBuf *g, int32_t v) noexcept nogil:
    memcpy(g.data + g.len, &v, 4)
    g.len += 4


cdef inline int _reserve_bits(GrowBuf *g, int64_t bits) noexcept nogil:
    cdef size_t need = <size_t>((bits + 7) >> 3)
    if need > g.len:
        if gb_reserve(g, need - g.len) != 0:
            return -1
        memset(g.data + g.len, 0, need - g.len)
        g.len = need
    return 0


cdef inline void _set_bit(GrowBuf *g, int64_t i) noexcept nogil:
    g.data[i >> 3] |= <uint8_t>(1 << (i & 7))


cdef int _columns_init(ColumnSet *c) noexcept nogil:
    memset(c, 0, sizeof(ColumnSet))
    if (gb_reserve(&c.key_off, 4) or gb_reserve(&c.val_off, 4) or gb_reserve(&c.hdr_off, 4)
            or gb_reserve(&c.hk_off, 4) or gb_reserve(&c.hv_off, 4)):
        return -1
    _put_i32(&c.key_off, 0)
    _put_i32(&c.val_off, 0)
    _put_i32(&c.hdr_off, 0)
    _put_i32(&c.hk_off, 0)
    _put_i32(&c.hv_off, 0)
    return 0


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


cdef inline int _append_binary(GrowBuf *offs, GrowBuf *data, GrowBuf *valid, int64_t index,
                               int64_t *nulls, const uint8_t *src, int32_t length) noexcept nogil:
    """Appends one nullable binary value; -1 out of memory, -2 past Arrow's int32 offsets."""
    if length < 0:
        nulls[0] += 1
    else:
        if data.len + <size_t>length > _INT32_LIMIT:
            return -2
        if length:  # an empty value may come with no buffer yet (NULL): memcpy wants neither
            _small_copy(data.data + data.len, src, length)
        data.len += length
        _set_bit(valid, index)
    _put_i32(offs, <int32_t>data.len)
    return 0


cdef int _append_v2(ColumnSet *c, const uint8_t *sec, const eng_record_view *views,
                    const eng_batch_header *h, int32_t batch_index, int64_t min_offset,
                    int64_t max_offset, eng_header_view *hbuf) noexcept nogil:
    """Appends the records of one parsed v2 batch whose offsets lie in
    [min_offset, max_offset). Returns 0, -1 (out of memory) or -2 (int32 offsets overflow)."""
    cdef int32_t i, count = h.record_count
    cdef size_t kbytes = 0, vbytes = 0, hbytes = 0, nh = 0
    cdef const eng_record_view *r
    cdef int64_t off
    cdef int rc
    for i in range(count):
        r = &views[i]
        kbytes += r.key_len if r.key_len > 0 else 0
        vbytes += r.value_len if r.value_len > 0 else 0
        hbytes += r.headers_bytes
        nh += r.headers_count
    if (gb_reserve(&c.offset, 8 * count) or gb_reserve(&c.timestamp, 8 * count)
            or gb_reserve(&c.ts_type, count) or gb_reserve(&c.batch_index, 4 * count)):
        return -1
    if c.keys and (gb_reserve(&c.key_off, 4 * count) or gb_reserve(&c.key_data, kbytes)
                   or _reserve_bits(&c.key_valid, c.n + count)):
        return -1
    if c.values and (gb_reserve(&c.val_off, 4 * count) or gb_reserve(&c.val_data, vbytes)
                     or _reserve_bits(&c.val_valid, c.n + count)):
        return -1
    if c.headers and (gb_reserve(&c.hdr_off, 4 * count) or gb_reserve(&c.hk_off, 4 * nh)
                      or gb_reserve(&c.hv_off, 4 * nh) or gb_reserve(&c.hk_data, hbytes)
                      or gb_reserve(&c.hv_data, hbytes)
                      or _reserve_bits(&c.hv_valid, c.nh + <int64_t>nh)):
        return -1
    for i in range(count):
        r = &views[i]
        off = _wrap_add(h.base_offset, r.offset_delta)
        if off < min_offset or (max_offset >= 0 and off >= max_offset):
            continue
        _put_i64(&c.offset, off)
        _put_i64(&c.timestamp, _record_timestamp(h, r.timestamp_delta))
        c.ts_type.data[c.ts_type.len] = <uint8_t>h.timestamp_type
        c.ts_type.len += 1
        _put_i32(&c.batch_index, batch_index)
        rc = 0
        if c.keys:
            rc = _append_binary(&c.key_off, &c.key_data, &c.key_valid, c.n, &c.key_nulls,
                                sec + r.key_off, r.key_len)
        if rc == 0 and c.values:
            rc = _append_binary(&c.val_off, &c.val_data, &c.val_valid, c.n, &c.val_nulls,
                                sec + r.value_off, r.value_len)
        if rc != 0:
            return rc
        if c.headers:
            if r.headers_count:
                rc = _append_headers(c, sec, r, hbuf)
                if rc != 0:
                    return rc
            _put_i32(&c.hdr_off, <int32_t>c.nh)
        c.n += 1
    return 0


cdef int _append_headers(ColumnSet *c, const uint8_t *sec, const eng_record_view *r,
                         eng_header_view *hbuf) noexcept nogil:
    """Appends one record's headers (space reserved by the caller); 0 or -2 as above."""
    cdef int32_t j
    cdef int rc
    eng_parse_headers(sec, r, hbuf)
    for j in range(r.headers_count):
        if c.hk_data.len + <size_t>hbuf[j].key_len > _INT32_LIMIT:
            return -2
        _small_copy(c.hk_data.data + c.hk_data.len, sec + hbuf[j].key_off, hbuf[j].key_len)
        c.hk_data.len += hbuf[j].key_len
        _put_i32(&c.hk_off, <int32_t>c.hk_data.len)
        rc = _append_binary(&c.hv_off, &c.hv_data, &c.hv_valid, c.nh, &c.hv_nulls,
                            sec + hbuf[j].value_off, hbuf[j].value_len)
        if rc != 0:
            return rc
        c.nh += 1
    return 0


cdef int _append_record(ColumnSet *c, Record rec, int32_t batch_index) except -1:
    """Appends one decoded Record (the legacy path, with the GIL)."""
    cdef int rc = 0
    if (gb_reserve(&c.offset, 8) or gb_reserve(&c.timestamp, 8) or gb_reserve(&c.ts_type, 1)
            or gb_reserve(&c.batch_index, 4) or gb_reserve(&c.key_off, 4)
            or gb_reserve(&c.val_off, 4) or gb_reserve(&c.hdr_off, 4)
            or _reserve_bits(&c.key_valid, c.n + 1) or _reserve_bits(&c.val_valid, c.n + 1)):
        raise MemoryError()
    _put_i64(&c.offset, rec.offset)
    _put_i64(&c.timestamp, rec.timestamp)
    c.ts_type.data[c.ts_type.len] = <uint8_t>rec._timestamp_type
    c.ts_type.len += 1
    _put_i32(&c.batch_index, batch_index)
    if c.keys:
        rc = _append_py_binary(&c.key_off, &c.key_data, &c.key_valid, c.n, &c.key_nulls,
                               rec.key)
    if rc == 0 and c.values:
        rc = _append_py_binary(&c.val_off, &c.val_data, &c.val_valid, c.n, &c.val_nulls,
                               rec.value)
    if rc == -2:
        raise RecordSizeLimitError("Decoded keys or values exceed 2 GiB: decode a smaller range")
    if c.headers:
        _put_i32(&c.hdr_off, <int32_t>c.nh)
    c.n += 1
    return 0


cdef int _append_py_binary(GrowBuf *offs, GrowBuf *data, GrowBuf *valid, int64_t index,
                           int64_t *nulls, object value) except -1:
    cdef const uint8_t[::1] mv
    if value is None:
        return _append_binary(offs, data, valid, index, nulls, NULL, -1)
    mv = value
    if gb_reserve(data, mv.shape[0]) != 0:
        raise MemoryError()
    return _append_binary(offs, data, valid, index, nulls,
                          &mv[0] if mv.shape[0] else NULL, <int32_t>mv.shape[0])


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


cdef int _reserve_range(ColumnSet *c, const eng_batch_header *rows, Py_ssize_t start,
                        Py_ssize_t stop, bint views=False) noexcept nogil:
    """Sizes the buffers once for the range, so growth (and its page faults) is rare;
    with `views`, key_data and val_data hold 16-byte views."""
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
    if (gb_reserve(&c.offset, 8 * records) or gb_reserve(&c.timestamp, 8 * records)
            or gb_reserve(&c.ts_type, records) or gb_reserve(&c.batch_index, 4 * records)):
        return -1
    if views:
        return (gb_reserve(&c.key_data, 16 * records) or gb_reserve(&c.val_data, 16 * records)
                # a header a record, as most topics with headers carry (more grow the buffers)
                or gb_reserve(&c.hk_data, 16 * records) or gb_reserve(&c.hv_data, 16 * records)
                or gb_reserve(&c.hdr_off, 4 * records))
    if ((c.keys and gb_reserve(&c.key_off, 4 * records))
            or (c.values and (gb_reserve(&c.val_off, 4 * records)
                              or gb_reserve(&c.val_data, raw)))
            or (c.headers and gb_reserve(&c.hdr_off, 4 * records))):
        return -1
    return 0


def decode_columns(object data, cnp.ndarray headers=None, Py_ssize_t start=0,
                   Py_ssize_t stop=-1, int64_t min_offset=-1, int64_t max_offset=-1,
                   bint include_control=True, bint verify_crc=True,
                   Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES,
                   bint with_keys=True, bint with_values=True, bint with_headers=True):
    """Decodes the records of scan rows [start, stop) of `data` into column buffers (see the
    layout above). `headers` is a scan of `data` (scanned here when None); records outside
    [min_offset, max_offset) are left out (-1: unbounded); control batches are left out
    unless `include_control`. With `verify_crc`, a batch with a bad CRC raises
    CorruptRecordError (the CRC covers every byte, so it reads the values too). Keys,
    values and headers are built only when asked for (`with_keys`, ...); without them, and
    without `verify_crc`, the value bytes of an uncompressed batch are never read. Parsing
    and copying run without the GIL; one decompression per compressed batch runs in its
    codec library. Returns a dict of numpy arrays."""
    cdef BufferView v = _view(data)
    if headers is None:
        headers, _ = scan(v, False)  # CRCs are checked per batch below, while hot in cache
    cdef Py_ssize_t n = headers.shape[0], i
    if stop < 0 or stop > n:
        stop = n
    if start < 0 or start > stop:
        raise ValueError(f"start {start} outside [0, {stop}]")
    _check_headers(headers, v, start, stop)
    if min_offset < 0:  # unbounded: records with negative offsets are not left out either
        min_offset = INT64_MIN
    cdef eng_batch_header *rows = <eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef ColumnSet c
    cdef RecordBatch b
    cdef const uint8_t *sec
    cdef size_t sec_len
    cdef eng_record_view *views = NULL
    cdef size_t views_cap = 0
    cdef eng_header_view *hbuf = NULL
    cdef size_t hbuf_cap = 0, max_h
    cdef int rc
    cdef int32_t j
    cdef eng_batch_header *h
    cdef Scratch scratch = take_scratch()  # every compressed section is decompressed here
    if _columns_init(&c) != 0:
        raise MemoryError()
    c.keys, c.values, c.headers = with_keys, with_values, with_headers
    try:
        if _reserve_range(&c, rows, start, stop) != 0:
            raise MemoryError()
        for i in range(start, stop):
            h = &rows[i]
            if h.is_control and not include_control:
                continue
            if max_offset >= 0 and h.base_offset >= max_offset and h.magic == 2:
                continue
            if h.last_offset < min_offset:
                continue
            b = _make_batch(v, h, False, max_decompressed_bytes)
            if verify_crc:
                b.ensure_valid()  # which brings the batch into cache as it goes
            elif h.compression == 0 and with_values:  # (values not asked for stay untouched)
                eng_touch(v.ptr + h.position, <size_t>h.size)
            if h.magic < 2:
                for rec in _legacy_records(b):
                    if rec.offset >= min_offset and (max_offset < 0 or rec.offset < max_offset):
                        _append_record(&c, rec, <int32_t>i)
                continue
            _owner = _v2_section(b, &sec, &sec_len, scratch)  # holds `sec` while parsed
            if h.record_count < 0 or <size_t>h.record_count > sec_len // 7:
                free(_alloc_views(b, sec_len))  # raises the typed error
            if <size_t>h.record_count > views_cap:
                free(views)
                views_cap = max(<size_t>h.record_count, 2 * views_cap)
                views = <eng_record_view *>malloc(views_cap * sizeof(eng_record_view))
                if views == NULL:
                    views_cap = 0
                    raise MemoryError()
            _parse_views(b, sec, sec_len, views)
            max_h = 0
            for j in range(h.record_count if with_headers else 0):
                max_h = max(max_h, <size_t>views[j].headers_count)
            if max_h > hbuf_cap:
                free(hbuf)
                hbuf_cap = max(max_h, 2 * hbuf_cap)
                hbuf = <eng_header_view *>malloc(hbuf_cap * sizeof(eng_header_view))
                if hbuf == NULL:
                    hbuf_cap = 0
                    raise MemoryError()
            with nogil:
                rc = _append_v2(&c, sec, views, h, <int32_t>i, min_offset, max_offset, hbuf)
            if rc == -1:
                raise MemoryError()
            if rc == -2:
                raise RecordSizeLimitError(
                    "Decoded keys, values or headers exceed 2 GiB (Arrow int32 offsets): "
                    "decode a smaller range", position=h.position, offset=h.base_offset)
        nrec, nhdr = c.n, c.nh
        out = {
            "num_records": nrec,
            "num_headers": nhdr,
            "offset": _take_array(&c.offset, np.int64, nrec),
            "timestamp": _take_array(&c.timestamp, np.int64, nrec),
            "timestamp_type": _take_array(&c.ts_type, np.int8, nrec),
            "batch_index": _take_array(&c.batch_index, np.int32, nrec),
        }
        if with_keys:
            out["key_offsets"] = _take_array(&c.key_off, np.int32, nrec + 1)
            out["key_data"] = _take_array(&c.key_data, np.uint8, c.key_data.len)
            out["key_validity"] = _take_array(&c.key_valid, np.uint8, (nrec + 7) // 8)
            out["key_null_count"] = c.key_nulls
        if with_values:
            out["value_offsets"] = _take_array(&c.val_off, np.int32, nrec + 1)
            out["value_data"] = _take_array(&c.val_data, np.uint8, c.val_data.len)
            out["value_validity"] = _take_array(&c.val_valid, np.uint8, (nrec + 7) // 8)
            out["value_null_count"] = c.val_nulls
        if with_headers:
            out["header_offsets"] = _take_array(&c.hdr_off, np.int32, nrec + 1)
            out["header_key_offsets"] = _take_array(&c.hk_off, np.int32, nhdr + 1)
            out["header_key_data"] = _take_array(&c.hk_data, np.uint8, c.hk_data.len)
            out["header_value_offsets"] = _take_array(&c.hv_off, np.int32, nhdr + 1)
            out["header_value_data"] = _take_array(&c.hv_data, np.uint8, c.hv_data.len)
            out["header_value_validity"] = _take_array(&c.hv_valid, np.uint8, (nhdr + 7) // 8)
            out["header_value_null_count"] = c.hv_nulls
        return out
    finally:
        free(views)
        free(hbuf)
        _columns_free(&c)
        give_scratch(scratch)


# ---- view columns: keys and values as Arrow binary views into the source -------------------
#
# Arrow's BinaryView layout, 16 bytes a value: int32 length, then for up to 12 bytes the value
# itself (zero-padded), else a 4-byte prefix, int32 buffer index and int32 offset into that
# buffer. Keys, values, header keys and header values of uncompressed batches point into the
# source buffer (buffer 0), those of a compressed batch into its decompressed section (the
# sections lie in a few big blocks, one buffer each, kept alive by the arrays), so nothing is
# copied but values of 12 bytes or less and legacy (magic 0/1) records, which are copied into
# one buffer of their own.

cdef size_t _ARENA_FIRST_BLOCK = 256 * 1024
cdef size_t _ARENA_MAX_BLOCK = 32 * 1024 * 1024


cdef class _SectionArena(Scratch):
    """Where the view decode puts decompressed sections: one after another in a few big
    blocks (big buffers: huge pages, recycled mappings) that the arrays keep. A fresh buffer
    a batch had the kernel fault in and zero every page of it, which cost more than the zstd
    decompression written there (14,500 page faults a 48 MiB decode)."""
    cdef object block  # numpy uint8 array that owns the current block
    cdef uint8_t *base
    cdef size_t used, block_cap, next_cap

    def __dealloc__(self):
        self.data = NULL  # inside `block`, which frees it

    cdef int reserve(self, size_t n, size_t keep=0) except -1:
        cdef GrowBuf g
        if self.base != NULL and n <= self.block_cap - self.used:
            self.data = self.base + self.used
            self.cap = self.block_cap - self.used
            return 0
        self.next_cap = min(max(2 * self.next_cap, _ARENA_FIRST_BLOCK), _ARENA_MAX_BLOCK)
        memset(&g, 0, sizeof(GrowBuf))
        if gb_reserve(&g, max(n, self.next_cap)) != 0:
            raise MemoryError()
        if keep:
            memcpy(g.data, self.data, keep)  # a section outgrew the block: move it along
        self.base = self.data = g.data
        self.block_cap = self.cap = g.cap
        self.used = 0
        self.block = _take_array(&g, np.uint8, <Py_ssize_t>self.block_cap)
        return 0

    cdef int64_t commit(self, size_t length):
        """Keeps the section just written; returns where it starts in `block`."""
        cdef int64_t at = <int64_t>self.used
        self.used += length
        return at


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


cdef int _append_v2_views(ColumnSet *c, const uint8_t *sec, const eng_record_view *views,
                          const eng_batch_header *h, int32_t batch_index, int64_t min_offset,
                          int64_t max_offset, eng_header_view *hbuf, int32_t buffer,
                          int64_t base) noexcept nogil:
    """_append_v2 with keys, values, header keys and header values as views into buffer
    `buffer`, whose byte `base` is the section's first (key_data, val_data, hk_data and
    hv_data hold the views): no record byte is copied beyond the 12 that a view inlines."""
    cdef int32_t i, j, count = h.record_count
    cdef size_t nh = 0
    cdef const eng_record_view *r
    cdef int64_t off
    for i in range(count):
        nh += views[i].headers_count
    if (gb_reserve(&c.offset, 8 * count) or gb_reserve(&c.timestamp, 8 * count)
            or gb_reserve(&c.ts_type, count) or gb_reserve(&c.batch_index, 4 * count)
            or gb_reserve(&c.hdr_off, 4 * count) or gb_reserve(&c.key_data, 16 * count)
            or gb_reserve(&c.val_data, 16 * count) or gb_reserve(&c.hk_data, 16 * nh)
            or gb_reserve(&c.hv_data, 16 * nh)
            or _reserve_bits(&c.key_valid, c.n + count) or _reserve_bits(&c.val_valid, c.n + count)
            or _reserve_bits(&c.hv_valid, c.nh + <int64_t>nh)):
        return -1
    for i in range(count):
        r = &views[i]
        off = _wrap_add(h.base_offset, r.offset_delta)
        if off < min_offset or (max_offset >= 0 and off >= max_offset):
            continue
        _put_i64(&c.offset, off)
        _put_i64(&c.timestamp, _record_timestamp(h, r.timestamp_delta))
        c.ts_type.data[c.ts_type.len] = <uint8_t>h.timestamp_type
        c.ts_type.len += 1
        _put_i32(&c.batch_index, batch_index)
        _view_value(&c.key_data, &c.key_valid, c.n, &c.key_nulls, sec, r.key_off, r.key_len,
                    buffer, base)
        _view_value(&c.val_data, &c.val_valid, c.n, &c.val_nulls, sec, r.value_off,
                    r.value_len, buffer, base)
        if r.headers_count:
            eng_parse_headers(sec, r, hbuf)
            for j in range(r.headers_count):
                _put_view(&c.hk_data, sec + hbuf[j].key_off, hbuf[j].key_len, buffer,
                          base + hbuf[j].key_off)
                _view_value(&c.hv_data, &c.hv_valid, c.nh, &c.hv_nulls, sec,
                            hbuf[j].value_off, hbuf[j].value_len, buffer, base)
                c.nh += 1
        _put_i32(&c.hdr_off, <int32_t>c.nh)
        c.n += 1
    return 0


cdef int _view_py_value(GrowBuf *views, GrowBuf *valid, int64_t index, int64_t *nulls,
                        object value, bytearray arena, int32_t buffer) except -1:
    """A legacy record's key or value: copied to the end of `arena` (buffer `buffer`)."""
    cdef const uint8_t[::1] mv
    cdef Py_ssize_t at = len(arena)
    if gb_reserve(views, 16) != 0:
        raise MemoryError()
    if value is None:
        _view_value(views, valid, index, nulls, NULL, 0, -1, 0, 0)
        return 0
    if at + len(value) > <Py_ssize_t>_INT32_LIMIT:
        raise RecordSizeLimitError("Legacy keys or values exceed 2 GiB: decode a smaller range")
    arena += value
    mv = arena
    _view_value(views, valid, index, nulls, &mv[0], <int32_t>at, <int32_t>len(value), buffer,
                0)
    return 0


def decode_view_columns(object data, cnp.ndarray headers=None, Py_ssize_t start=0,
                        Py_ssize_t stop=-1, int64_t min_offset=-1, int64_t max_offset=-1,
                        bint include_control=True, bint verify_crc=True,
                        Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES):
    """decode_columns() with keys and values as Arrow binary views (see above) instead of
    copies: "key_views" / "value_views" (uint8, 16 bytes a record) index into "buffers", a
    list of buffer-protocol objects (the source first) that the arrays must keep alive.
    Header keys and values are views too ("header_key_views" / "header_value_views"). The
    source must not change while the views
    are used (a sealed segment: a mapping whose file is deleted stays readable; one whose
    file is truncated does not)."""
    cdef BufferView v = _view(data)
    if headers is None:
        headers, _ = scan(v, False)
    cdef Py_ssize_t n = headers.shape[0], i
    if stop < 0 or stop > n:
        stop = n
    if start < 0 or start > stop:
        raise ValueError(f"start {start} outside [0, {stop}]")
    _check_headers(headers, v, start, stop)
    if min_offset < 0:
        min_offset = INT64_MIN
    cdef eng_batch_header *rows = <eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef ColumnSet c
    cdef RecordBatch b
    cdef const uint8_t *sec
    cdef size_t sec_len
    cdef eng_record_view *views = NULL
    cdef size_t views_cap = 0
    cdef eng_header_view *hbuf = NULL
    cdef size_t hbuf_cap = 0, max_h
    cdef int rc
    cdef int32_t j, buffer, legacy_buffer = -1
    cdef int64_t base
    cdef eng_batch_header *h
    cdef Record rec
    cdef list buffers = [v.obj]
    cdef bytearray legacy_arena = bytearray()
    cdef _SectionArena arena = _SectionArena()
    cdef object arena_block = None
    cdef int32_t arena_buffer = -1
    if _columns_init(&c) != 0 or _reserve_range(&c, rows, start, stop, True) != 0:
        _columns_free(&c)
        raise MemoryError()
    try:
        for i in range(start, stop):
            h = &rows[i]
            if h.is_control and not include_control:
                continue
            if max_offset >= 0 and h.base_offset >= max_offset and h.magic == 2:
                continue
            if h.last_offset < min_offset:
                continue
            b = _make_batch(v, h, False, max_decompressed_bytes)
            if verify_crc:
                b.ensure_valid()  # which brings the batch into cache as it goes
            elif h.compression == 0:
                eng_touch(v.ptr + h.position, <size_t>h.size)
            if h.magic < 2:
                if legacy_buffer < 0:
                    legacy_buffer = len(buffers)
                    buffers.append(legacy_arena)
                for item in _legacy_records(b):
                    rec = <Record>item
                    if rec.offset < min_offset or (max_offset >= 0 and rec.offset >= max_offset):
                        continue
                    if (gb_reserve(&c.offset, 8) or gb_reserve(&c.timestamp, 8)
                            or gb_reserve(&c.ts_type, 1) or gb_reserve(&c.batch_index, 4)
                            or gb_reserve(&c.hdr_off, 4) or _reserve_bits(&c.key_valid, c.n + 1)
                            or _reserve_bits(&c.val_valid, c.n + 1)):
                        raise MemoryError()
                    _put_i64(&c.offset, rec.offset)
                    _put_i64(&c.timestamp, rec.timestamp)
                    c.ts_type.data[c.ts_type.len] = <uint8_t>rec._timestamp_type
                    c.ts_type.len += 1
                    _put_i32(&c.batch_index, <int32_t>i)
                    _view_py_value(&c.key_data, &c.key_valid, c.n, &c.key_nulls, rec.key,
                                   legacy_arena, legacy_buffer)
                    _view_py_value(&c.val_data, &c.val_valid, c.n, &c.val_nulls, rec.value,
                                   legacy_arena, legacy_buffer)
                    _put_i32(&c.hdr_off, <int32_t>c.nh)
                    c.n += 1
                continue
            owner = _v2_section(b, &sec, &sec_len, arena if h.compression else None)
            if owner is v:
                buffer, base = 0, sec - v.ptr
            elif owner is arena:
                base = arena.commit(sec_len)
                if arena.block is not arena_block:
                    arena_block = arena.block
                    arena_buffer = len(buffers)
                    buffers.append(arena_block)
                buffer = arena_buffer
            else:  # decompressed by a codec binding into an object of its own
                buffer, base = len(buffers), 0
                buffers.append(owner)
            if base + <int64_t>sec_len > <int64_t>_INT32_LIMIT:
                raise RecordSizeLimitError(
                    "Batch lies beyond 2 GiB into the buffer (Arrow view offsets are int32): "
                    "decode a slice of the segment", position=h.position, offset=h.base_offset)
            if h.record_count < 0 or <size_t>h.record_count > sec_len // 7:
                free(_alloc_views(b, sec_len))  # raises the typed error
            if <size_t>h.record_count > views_cap:
                free(views)
                views_cap = max(<size_t>h.record_count, 2 * views_cap)
                views = <eng_record_view *>malloc(views_cap * sizeof(eng_record_view))
                if views == NULL:
                    views_cap = 0
                    raise MemoryError()
            _parse_views(b, sec, sec_len, views)
            max_h = 0
            for j in range(h.record_count):
                max_h = max(max_h, <size_t>views[j].headers_count)
            if max_h > hbuf_cap:
                free(hbuf)
                hbuf_cap = max(max_h, 2 * hbuf_cap)
                hbuf = <eng_header_view *>malloc(hbuf_cap * sizeof(eng_header_view))
                if hbuf == NULL:
                    hbuf_cap = 0
                    raise MemoryError()
            with nogil:
                rc = _append_v2_views(&c, sec, views, h, <int32_t>i, min_offset, max_offset,
                                      hbuf, buffer, base)
            if rc == -1:
                raise MemoryError()
        nrec, nhdr = c.n, c.nh
        return {
            "num_records": nrec,
            "num_headers": nhdr,
            "buffers": buffers,
            "offset": _take_array(&c.offset, np.int64, nrec),
            "timestamp": _take_array(&c.timestamp, np.int64, nrec),
            "timestamp_type": _take_array(&c.ts_type, np.int8, nrec),
            "batch_index": _take_array(&c.batch_index, np.int32, nrec),
            "key_views": _take_array(&c.key_data, np.uint8, 16 * nrec),
            "key_validity": _take_array(&c.key_valid, np.uint8, (nrec + 7) // 8),
            "key_null_count": c.key_nulls,
            "value_views": _take_array(&c.val_data, np.uint8, 16 * nrec),
            "value_validity": _take_array(&c.val_valid, np.uint8, (nrec + 7) // 8),
            "value_null_count": c.val_nulls,
            "header_offsets": _take_array(&c.hdr_off, np.int32, nrec + 1),
            "header_key_views": _take_array(&c.hk_data, np.uint8, 16 * nhdr),
            "header_key_null_count": 0,
            "header_value_views": _take_array(&c.hv_data, np.uint8, 16 * nhdr),
            "header_value_validity": _take_array(&c.hv_valid, np.uint8, (nhdr + 7) // 8),
            "header_value_null_count": c.hv_nulls,
        }
    finally:
        free(views)
        free(hbuf)
        _columns_free(&c)
