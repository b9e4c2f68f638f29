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
#
# The view decode (decode_view_columns, below) fills the same buffers with Arrow binary
# views instead of copies; both run through one walk (`_RangeDecoder`): the filters, the CRC
# check, the parse of each batch and the per-record columns are the same code. The buffers
# and the per-record appends (copies and views) are engine._native.columns.

cimport numpy as cnp
from libc.stdint cimport INT64_MIN, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from batch cimport eng_batch_header, eng_header_view, eng_record_view, eng_touch
from engine._native.codecs cimport Scratch, give_scratch, take_scratch
from engine._native.columns cimport (
    _INT32_LIMIT,
    ColumnSet,
    CrcCursor,
    GrowBuf,
    _append_record,
    _append_v2,
    _columns_free,
    _columns_init,
    _copied_columns,
    _left_out,
    _reserve_range,
    _take_array,
    _view_columns,
    gb_reserve,
)
from engine._native.decode cimport (
    Record,
    RecordBatch,
    _alloc_views,
    _check_headers,
    _legacy_records,
    _make_batch,
    _parse_views,
    _v2_section,
)
from engine._native.errors cimport raise_status
from engine._native.scan cimport BufferView, _view
from status cimport ENG_ERR_CORRUPT, ENG_ERR_LIMIT, ENG_OK

import numpy as np

from engine._native.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES
from engine._native.scan import scan

cnp.import_array()

# ---- the walk over a range of scan rows -----------------------------------------------------

cdef inline bint _batch_left_out(const eng_batch_header *h, bint include_control,
                                 int64_t min_offset, int64_t max_offset) noexcept nogil:
    """Whether no record of the batch can be wanted (a v2 batch's base offset is exact; a
    legacy wrapper's is not, so its records are filtered one by one)."""
    return ((h.is_control and not include_control)
            or (max_offset >= 0 and h.base_offset >= max_offset and h.magic == 2)
            or h.last_offset < min_offset)


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
        if gb_reserve(&g, max(n, self.next_cap)) != ENG_OK:
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


cdef class _RangeDecoder:
    """One decode of scan rows [start, stop) into a ColumnSet, copying or as views: the
    batch filters, the CRC check, each v2 batch's parse into record views and the records'
    columns are the same for both; they differ only in where a section's bytes live."""
    cdef BufferView v
    cdef cnp.ndarray headers
    cdef eng_batch_header *rows
    cdef Py_ssize_t start, stop, limit
    cdef int64_t min_offset, max_offset
    cdef bint include_control, verify_crc, touch
    cdef bint fuse_crc             # copies: check uncompressed batches' CRCs while copying
    cdef Py_ssize_t prefetched     # the batch the last one's decode prefetched
    cdef ColumnSet c
    cdef eng_record_view *views
    cdef eng_header_view *hbuf
    cdef size_t views_cap, hbuf_cap
    cdef Scratch scratch           # copies: where compressed sections are decompressed
    cdef _SectionArena arena       # views: where they are decompressed and kept
    cdef list buffers              # views: what they point into (the source first)
    cdef bytearray legacy_arena    # views: copies of legacy keys and values
    cdef int32_t legacy_buffer, arena_buffer
    cdef object arena_block

    def __cinit__(self):
        memset(&self.c, 0, sizeof(ColumnSet))
        self.legacy_buffer = self.arena_buffer = -1
        self.prefetched = -1

    def __dealloc__(self):
        free(self.views)
        free(self.hbuf)
        _columns_free(&self.c)

    cdef int open(self, object data, cnp.ndarray headers, Py_ssize_t start, Py_ssize_t stop,
                  int64_t min_offset, int64_t max_offset, bint include_control,
                  bint verify_crc, Py_ssize_t limit) except -1:
        self.v = _view(data)
        if headers is None:
            headers, _ = scan(self.v, False)  # CRCs are checked per batch, while hot in cache
        if stop < 0 or stop > headers.shape[0]:
            stop = headers.shape[0]
        if start < 0 or start > stop:
            raise ValueError(f"start {start} outside [0, {stop}]")
        _check_headers(headers, self.v, start, stop)
        self.headers = headers
        self.rows = <eng_batch_header *>cnp.PyArray_DATA(headers)
        self.start, self.stop, self.limit = start, stop, limit
        # unbounded: records with negative offsets are not left out either
        self.min_offset = INT64_MIN if min_offset < 0 else min_offset
        self.max_offset = max_offset
        self.include_control, self.verify_crc = include_control, verify_crc
        if _columns_init(&self.c) != ENG_OK:
            raise MemoryError()
        return 0

    cdef int run(self) except -1:
        cdef Py_ssize_t i
        cdef eng_batch_header *h
        cdef RecordBatch b
        if _reserve_range(&self.c, self.rows, self.start, self.stop) != ENG_OK:
            raise MemoryError()
        for i in range(self.start, self.stop):
            h = &self.rows[i]
            if _batch_left_out(h, self.include_control, self.min_offset, self.max_offset):
                continue
            b = _make_batch(self.v, h, False, self.limit)
            fused = self.fuse_crc and h.magic == 2 and h.compression == 0
            if self.verify_crc and not fused:
                b.ensure_valid()  # which brings the batch into cache as it goes
            elif h.compression == 0 and self.touch and self.prefetched != i:
                # the parse chases record lengths: stream the batch into cache ahead of it
                # (a fused CRC still needs this; it runs after the parse), unless the last
                # batch's decode did (see _append_v2)
                eng_touch(self.v.ptr + h.position, <size_t>h.size)
            if h.magic < 2:
                self._legacy(b, <int32_t>i)
            else:
                self._v2(b, h, <int32_t>i, fused)
        return 0

    cdef int _legacy(self, RecordBatch b, int32_t index) except -1:
        cdef Record rec
        if self.c.as_views and self.legacy_buffer < 0:
            self.legacy_buffer = len(self.buffers)
            self.buffers.append(self.legacy_arena)
        for item in _legacy_records(b):
            rec = <Record>item
            if not _left_out(rec.offset, self.min_offset, self.max_offset):
                _append_record(&self.c, rec, index, self.legacy_arena, self.legacy_buffer)
        return 0

    cdef int _v2(self, RecordBatch b, const eng_batch_header *h, int32_t index,
                 bint fused) except -1:
        """Appends a v2 batch's records; with `fused` (an uncompressed batch whose CRC is
        still to check) checksums it while copying. Any failure of such a batch is its CRC
        error when the CRC does not match, as when the CRC is checked first."""
        cdef const uint8_t *sec
        cdef size_t sec_len
        cdef int32_t buffer = 0
        cdef int64_t base = 0
        cdef int rc
        cdef CrcCursor crc
        cdef const eng_batch_header *nxt
        cdef const uint8_t *ahead = NULL
        cdef size_t ahead_len = 0
        if self.c.as_views:
            owner = _v2_section(b, &sec, &sec_len, self.arena if h.compression else None)
            self._place(owner, h, sec, sec_len, &buffer, &base)
        else:
            owner = _v2_section(b, &sec, &sec_len, self.scratch)  # holds `sec` while parsed
        try:
            self._parse(b, sec, sec_len)
        except Exception:
            if fused:
                b.ensure_valid()
            raise
        crc.at = self.v.ptr + h.position + 21  # a v2 CRC covers [21, size)
        crc.end = self.v.ptr + h.position + h.size
        crc.crc = 0
        if index + 1 < self.stop and self.rows[index + 1].compression == 0:
            nxt = &self.rows[index + 1]
            ahead, ahead_len = self.v.ptr + nxt.position, <size_t>nxt.size
            self.prefetched = index + 1
        with nogil:
            rc = _append_v2(&self.c, sec, sec_len, self.views, h, index, self.min_offset,
                            self.max_offset, self.hbuf, buffer, base, &crc if fused else NULL,
                            ahead, ahead_len)
        if rc != ENG_OK:
            if fused:
                b.ensure_valid()  # raises the CRC error if the CRC is why
            raise_status(rc, "Record batch changed while it was decoded" if rc == ENG_ERR_CORRUPT
                         else "Decoded keys, values or headers exceed 2 GiB (Arrow int32 "
                         "offsets): decode a smaller range", position=h.position,
                         offset=h.base_offset)
        return 0

    cdef int _parse(self, RecordBatch b, const uint8_t *sec, size_t sec_len) except -1:
        """Parses a v2 section into `views` (and sizes `hbuf` for its headers)."""
        cdef int32_t j, count = b.h.record_count
        cdef size_t max_h = 0
        if count < 0 or <size_t>count > sec_len // 7:
            free(_alloc_views(b, sec_len))  # raises the typed error
        if <size_t>count > self.views_cap:
            free(self.views)
            self.views_cap = max(<size_t>count, 2 * self.views_cap)
            self.views = <eng_record_view *>malloc(self.views_cap * sizeof(eng_record_view))
            if self.views == NULL:
                self.views_cap = 0
                raise MemoryError()
        _parse_views(b, sec, sec_len, self.views)
        for j in range(count if self.c.headers else 0):
            max_h = max(max_h, <size_t>self.views[j].headers_count)
        if max_h > self.hbuf_cap:
            free(self.hbuf)
            self.hbuf_cap = max(max_h, 2 * self.hbuf_cap)
            self.hbuf = <eng_header_view *>malloc(self.hbuf_cap * sizeof(eng_header_view))
            if self.hbuf == NULL:
                self.hbuf_cap = 0
                raise MemoryError()
        return 0

    cdef int _place(self, object owner, const eng_batch_header *h, const uint8_t *sec,
                    size_t sec_len, int32_t *buffer, int64_t *base) except -1:
        """The buffer views of a section point into, and where the section starts in it."""
        if owner is self.v:
            buffer[0], base[0] = 0, sec - self.v.ptr
        elif owner is self.arena:
            base[0] = self.arena.commit(sec_len)
            if self.arena.block is not self.arena_block:
                self.arena_block = self.arena.block
                self.arena_buffer = len(self.buffers)
                self.buffers.append(self.arena_block)
            buffer[0] = self.arena_buffer
        else:  # decompressed by a codec binding into an object of its own
            buffer[0], base[0] = len(self.buffers), 0
            self.buffers.append(owner)
        if base[0] + <int64_t>sec_len > <int64_t>_INT32_LIMIT:
            raise_status(ENG_ERR_LIMIT, "Batch lies beyond 2 GiB into the buffer (Arrow view "
                         "offsets are int32): decode a slice of the segment",
                         position=h.position, offset=h.base_offset)
        return 0


def decode_columns(object data, cnp.ndarray headers=None, Py_ssize_t start=0,
                   Py_ssize_t stop=-1, int64_t min_offset=-1, int64_t max_offset=-1,
                   bint include_control=True, bint verify_crc=True,
                   Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES,
                   bint with_keys=True, bint with_values=True, bint with_headers=True,
                   bint fuse_crc=True):
    """Decodes the records of scan rows [start, stop) of `data` into column buffers (see the
    layout above). `headers` is a scan of `data` (scanned here when None); records outside
    [min_offset, max_offset) are left out (-1: unbounded); control batches are left out
    unless `include_control`. With `verify_crc`, a batch with a bad CRC raises
    CorruptRecordError (the CRC covers every byte, so it reads the values too). Keys,
    values and headers are built only when asked for (`with_keys`, ...); without them, and
    without `verify_crc`, the value bytes of an uncompressed batch are never read. Parsing
    and copying run without the GIL; one decompression per compressed batch runs in its
    codec library. Returns a dict of numpy arrays.

    With `verify_crc`, an uncompressed batch is checksummed while its records are copied,
    a block ahead of the copies, so its bytes are read from memory once; `fuse_crc=False`
    checks each batch's CRC in a pass of its own first (for tests and benchmarks: the
    result, and the error a bad CRC raises, are the same)."""
    cdef _RangeDecoder d = _RangeDecoder()
    d.open(data, headers, start, stop, min_offset, max_offset, include_control, verify_crc,
           max_decompressed_bytes)
    d.c.keys, d.c.values, d.c.headers = with_keys, with_values, with_headers
    d.touch = with_values  # (values not asked for stay untouched)
    d.fuse_crc = verify_crc and fuse_crc
    d.scratch = take_scratch()  # every compressed section is decompressed here
    try:
        d.run()
        return _copied_columns(&d.c)
    finally:
        give_scratch(d.scratch)
        d.scratch = None


def decode_view_columns(object data, cnp.ndarray headers=None, Py_ssize_t start=0,
                        Py_ssize_t stop=-1, int64_t min_offset=-1, int64_t max_offset=-1,
                        bint include_control=True, bint verify_crc=True,
                        Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES):
    """decode_columns() with keys and values as Arrow binary views (see above) instead of
    copies: "key_views" / "value_views" (uint8, 16 bytes a record) index into "buffers", a
    list of buffer-protocol objects (the source first) that the arrays must keep alive.
    Header keys and values are views too ("header_key_views" / "header_value_views"). The
    source must not change while the views are used (a sealed segment: a mapping whose file
    is deleted stays readable; one whose file is truncated does not)."""
    cdef _RangeDecoder d = _RangeDecoder()
    d.open(data, headers, start, stop, min_offset, max_offset, include_control, verify_crc,
           max_decompressed_bytes)
    d.c.keys = d.c.values = d.c.headers = d.c.as_views = d.touch = True
    d.buffers = [d.v.obj]
    d.legacy_arena = bytearray()
    d.arena = _SectionArena()
    d.run()
    return _view_columns(&d.c, d.buffers)
