# distutils: sources = [_native/src/batch.c, _native/src/crc32c.c]
# cython: language_level=3
"""Kafka record batches decoded to Python objects: RecordBatch (a v2 batch or a v0/v1
message, field names Kafka's), Record, v2 record decode and legacy (magic 0/1) messages.

Parsing runs with the GIL released; each record's key, value and headers are built straight
from the batch's bytes (or its decompressed records section). Objects returned here keep the
buffer they were decoded from alive.
"""

cimport cython
cimport numpy as cnp
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

from batch cimport (
    ENG_LOG_OVERHEAD,
    ENG_RECORD_BATCH_OVERHEAD,
    eng_batch_header,
    eng_header_view,
    eng_increment_sequence,
    eng_parse_headers,
    eng_parse_records,
    eng_record_view,
    eng_scan_count,
    eng_scan_fill,
    kb_load_i32,
)
from checksums cimport eng_crc32, eng_crc32c
from engine._native.codecs cimport (
    Scratch,
    _codec_shown,
    decompress,
    decompress_section,
    give_scratch,
    take_scratch,
)
from engine._native.errors cimport raise_eng_error, raise_status
from engine._native.scan cimport BufferView, _view
from status cimport ENG_OK, eng_error

import enum

import numpy as np

from engine._native.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES, CompressionType
from engine._native.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from engine._native.scan import BATCH_HEADER_DTYPE, scan

cnp.import_array()


cdef extern from *:
    """
    #include <structmember.h>

    /* Adds a member descriptor to a type made by Cython (which exposes attributes as
       properties): CPython 3.11+ specialises loads of a T_OBJECT_EX member to one indexed
       read, where a property costs a lookup and a call. */
    static int eng_add_member(PyTypeObject *t, PyMemberDef *m) {
        PyObject *d = PyDescr_NewMember(t, m);
        int rc;
        if (d == NULL)
            return -1;
        rc = PyDict_SetItemString(t->tp_dict, m->name, d);
        Py_DECREF(d);
        if (rc == 0)
            PyType_Modified(t);
        return rc;
    }
    """
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    int T_OBJECT_EX
    int READONLY
    int eng_add_member(PyTypeObject *t, PyMemberDef *m) except -1


class TimestampType(enum.IntEnum):
    """Kafka's TimestampType; magic 0 data has none."""
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def name_kafka(self):
        return ("NoTimestampType", "CreateTime", "LogAppendTime")[self.value + 1]


cdef tuple _TIMESTAMP_TYPES = (TimestampType.NO_TIMESTAMP_TYPE, TimestampType.CREATE_TIME,
                               TimestampType.LOG_APPEND_TIME)
cdef tuple _COMPRESSION_TYPES = tuple(CompressionType)
cdef tuple _NO_HEADERS = ()

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


@cython.no_gc  # holds only ints, bytes, None and a tuple of (str, bytes): never in a cycle
@cython.freelist(256)
cdef class Record:
    """One record with Kafka's field names. `headers` is a tuple of (str, bytes | None);
    header keys are decoded as UTF-8 with surrogateescape so any bytes round-trip."""
    @property
    def timestamp_type(self):
        return _TIMESTAMP_TYPES[self._timestamp_type + 1]

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return self._astuple() == (<Record>other)._astuple()

    def __hash__(self):
        return hash(self._astuple())

    cdef tuple _astuple(self):
        return (self.offset, self.timestamp, self._timestamp_type, self.key, self.value,
                self.headers, self.sequence, self.is_control)

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"key={self.key!r}, value={_short(self.value)}, headers={self.headers!r})")


cdef PyMemberDef _RECORD_MEMBERS[5]


cdef int _record_members() except -1:
    """offset, timestamp, key, value and headers as read-only member descriptors."""
    cdef Record probe = Record.__new__(Record)
    cdef char *base = <char *><PyObject *>probe
    cdef char *fields[5]
    cdef const char *names[5]
    fields[:] = [<char *>&probe.offset, <char *>&probe.timestamp, <char *>&probe.key,
                 <char *>&probe.value, <char *>&probe.headers]
    names[:] = [b"offset", b"timestamp", b"key", b"value", b"headers"]
    cdef int i
    for i in range(5):
        _RECORD_MEMBERS[i].name = names[i]
        _RECORD_MEMBERS[i].type = T_OBJECT_EX
        _RECORD_MEMBERS[i].offset = fields[i] - base
        _RECORD_MEMBERS[i].flags = READONLY
        _RECORD_MEMBERS[i].doc = NULL
        eng_add_member(<PyTypeObject *>Record, &_RECORD_MEMBERS[i])
    return 0


_record_members()


cdef str _short(object value):
    if value is None or len(value) <= 32:
        return repr(value)
    return repr(value[:32]) + f"...({len(value)} bytes)"


cdef inline Record _new_record(object offset, object timestamp, int8_t ts_type, object key,
                               object value, tuple headers, int32_t sequence, bint control):
    cdef Record r = Record.__new__(Record)
    r.offset = offset
    r.timestamp = timestamp
    r._timestamp_type = ts_type
    r.key = key
    r.value = value
    r.headers = headers
    r.sequence = sequence
    r.is_control = control
    return r


cdef inline object _bytes_or_none(const uint8_t *base, int32_t off, int32_t length):
    if length < 0:
        return None
    return PyBytes_FromStringAndSize(<const char *>base + off, length)


cdef class RecordBatch:
    """One entry of a log: a v2 batch, or one v0/v1 message (a compressed legacy wrapper
    holding an inner message set is one entry). Field names are Kafka's.

    `records()` decodes (and decompresses) on demand; nothing is cached, so a batch object
    is cheap to create from a scan row. Not thread-safe to mutate; safe to read from threads.
    """
    @property
    def position(self): return self.h.position

    @property
    def size_in_bytes(self): return self.h.size

    @property
    def magic(self): return self.h.magic

    @property
    def last_offset(self): return self.h.last_offset

    @property
    def next_offset(self): return _wrap_add(self.h.last_offset, 1)

    @property
    def partition_leader_epoch(self): return self.h.partition_leader_epoch

    @property
    def crc(self): return self.h.crc

    @property
    def attributes(self): return self.h.attributes

    @property
    def compression_type(self):
        if 0 <= self.h.compression <= 4:
            return _COMPRESSION_TYPES[self.h.compression]
        raise UnsupportedCompressionTypeError(
            f"Unknown compression type id {self.h.compression}",
            position=self.h.position, offset=self.h.base_offset)

    @property
    def timestamp_type(self): return _TIMESTAMP_TYPES[self.h.timestamp_type + 1]

    @property
    def is_transactional(self): return bool(self.h.is_transactional)

    @property
    def is_control(self): return bool(self.h.is_control)

    @property
    def has_delete_horizon(self): return bool(self.h.has_delete_horizon)

    @property
    def delete_horizon_ms(self):
        return self.h.base_timestamp if self.h.has_delete_horizon else None

    @property
    def base_timestamp(self): return self.h.base_timestamp

    @property
    def max_timestamp(self): return self.h.max_timestamp

    @property
    def producer_id(self): return self.h.producer_id

    @property
    def producer_epoch(self): return self.h.producer_epoch

    @property
    def base_sequence(self): return self.h.base_sequence

    @property
    def last_sequence(self):
        if self.h.base_sequence < 0:
            return -1
        return eng_increment_sequence(self.h.base_sequence,
                                      <int32_t>_wrap_sub(self.h.last_offset,
                                                         self.h.base_offset))

    @property
    def record_count(self):
        """Records in the batch; for a compressed legacy wrapper, known only by decoding."""
        if self.h.record_count < 0 and self.h.magic < 2:
            return len(self.records())
        return self.h.record_count

    @property
    def base_offset(self):
        """Offset of the first record. For a compressed legacy wrapper this is the first
        inner message's offset, which Kafka (like us) learns by decompressing."""
        if self.h.magic < 2 and self.h.compression != 0:
            if self._legacy_base_offset is None:
                recs = self.records()
                self._legacy_base_offset = recs[0].offset if recs else self.h.base_offset
            return self._legacy_base_offset
        return self.h.base_offset

    def header(self):
        """The scan row of this batch (a BATCH_HEADER_DTYPE scalar)."""
        arr = np.empty(1, dtype=BATCH_HEADER_DTYPE)
        memcpy(cnp.PyArray_DATA(arr), &self.h, sizeof(eng_batch_header))
        return arr[0]

    def is_valid(self):
        """True when the stored CRC matches (CRC-32C for v2, CRC-32 for v0/v1)."""
        cdef const uint8_t *e
        if not self.crc_checked:
            e = self.buffer.ptr + self.h.position
            with nogil:
                if self.h.magic == 2:
                    self.h.crc_valid = eng_crc32c(0, e + 21, self.h.size - 21) == self.h.crc
                else:
                    self.h.crc_valid = eng_crc32(0, e + 16, self.h.size - 16) == self.h.crc
            self.crc_checked = True
        return bool(self.h.crc_valid)

    def ensure_valid(self):
        """Raises CorruptRecordError naming position and offset when the CRC is wrong."""
        if not self.is_valid():
            e = self.buffer.ptr + self.h.position
            if self.h.magic == 2:
                computed = eng_crc32c(0, e + 21, self.h.size - 21)
            else:
                computed = eng_crc32(0, e + 16, self.h.size - 16)
            raise CorruptRecordError(
                f"Record batch is corrupt (stored crc = {self.h.crc}, computed crc = "
                f"{computed})", position=self.h.position, offset=self.h.base_offset)

    def raw(self):
        """The entry's bytes, as a memoryview of the underlying buffer (no copy)."""
        start = self.h.position
        return memoryview(self.buffer.obj).cast("B")[start:start + self.h.size]

    def records_section(self):
        """The records section after decompression: a v2 batch's records (one stream), or a
        legacy wrapper's inner message set. For uncompressed data, a memoryview (no copy)."""
        cdef Py_ssize_t start
        if self.h.magic == 2:
            start = self.h.position + ENG_RECORD_BATCH_OVERHEAD
            raw = memoryview(self.buffer.obj).cast("B")[start:self.h.position + self.h.size]
            if self.h.compression == 0:
                return raw
            if self.h.record_count == 0:
                return b""
            return decompress(self.h.compression, raw, self.max_decompressed_bytes, 2,
                              self.h.position, self.h.base_offset)
        return _legacy_inner_set(self)

    def records(self, section=None):
        """Decodes every record (a list of Record). Raises CorruptRecordError /
        InvalidRecordError naming the batch position and offset on malformed content.

        `section` may be this batch's `records_section()` computed earlier (say, on another
        thread), so decompression and record creation can overlap.
        """
        if self.h.magic == 2:
            return _v2_records(self, section)
        return _legacy_records(self, section)

    def __iter__(self):
        return iter(self.records())

    def __repr__(self):
        return (f"RecordBatch(magic={self.h.magic}, offsets={self.h.base_offset}.."
                f"{self.h.last_offset}, position={self.h.position}, size={self.h.size}, "
                f"compression={_codec_shown(self.h.compression)}, "
                f"records={self.h.record_count})")


cdef RecordBatch _make_batch(BufferView v, const eng_batch_header *h, bint crc_checked,
                             Py_ssize_t limit):
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    b.buffer = v
    b.h = h[0]
    b.crc_checked = crc_checked
    b.max_decompressed_bytes = limit
    return b


def batches(object data, bint verify_crc=False,
            Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES):
    """Scans `data` and returns (list of RecordBatch, valid_bytes). With `verify_crc` the
    CRCs are computed during the scan (still nogil); `is_valid()` is then free."""
    cdef BufferView v = _view(data)
    headers, valid = scan(v, verify_crc)
    return batches_from_headers(v, headers, verify_crc, max_decompressed_bytes), valid


def batches_from_headers(object data, cnp.ndarray headers, bint crc_checked=False,
                         Py_ssize_t max_decompressed_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES):
    """RecordBatch objects for the rows of a scan of `data` (rows may be a subset)."""
    cdef BufferView v = _view(data)
    _check_headers(headers, v)
    cdef const eng_batch_header *rows = <const eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef Py_ssize_t i, n = headers.shape[0]
    return [_make_batch(v, &rows[i], crc_checked, max_decompressed_bytes) for i in range(n)]


cdef int _check_headers(cnp.ndarray headers, BufferView v, Py_ssize_t start=0,
                        Py_ssize_t stop=-1) except -1:
    """Rows come from Python: prove that rows [start, stop) (all by default) describe whole
    entries inside the buffer. Only the rows about to be used are checked, so decoding a
    small range of a big scan costs what the range costs."""
    if headers.dtype != BATCH_HEADER_DTYPE or not headers.flags.c_contiguous:
        raise TypeError("headers must be a C-contiguous BATCH_HEADER_DTYPE array from scan()")
    if headers.ndim != 1:
        raise TypeError("headers must be one-dimensional")
    cdef const eng_batch_header *rows = <const eng_batch_header *>cnp.PyArray_DATA(headers)
    cdef Py_ssize_t i
    if stop < 0 or stop > headers.shape[0]:
        stop = headers.shape[0]
    for i in range(max(start, 0), stop):
        if (rows[i].position < 0 or rows[i].size < ENG_LOG_OVERHEAD + 14
                or rows[i].size > v.nbytes - rows[i].position  # (no int64 overflow)
                or (rows[i].magic == 2 and rows[i].size < ENG_RECORD_BATCH_OVERHEAD)
                or rows[i].magic < 0 or rows[i].magic > 2
                or <int64_t>kb_load_i32(v.ptr + rows[i].position + 8) + ENG_LOG_OVERHEAD
                != rows[i].size):
            raise ValueError(f"headers row {i} does not describe an entry of this buffer")
    return 0


cdef object _v2_section(RecordBatch b, const uint8_t **sec, size_t *sec_len,
                        Scratch scratch=None):
    """Points `sec` at the batch's records; returns the object that owns the bytes. A
    compressed section is decompressed into `scratch` when given (and the codec can)."""
    cdef const eng_batch_header *h = &b.h
    cdef BufferView hv
    if h.record_count == 0:
        # Kafka iterates a batch of count 0 as empty without reading (or decompressing) its
        # records section: compaction leaves such batches
        sec[0] = b.buffer.ptr + h.position
        sec_len[0] = 0
        return b.buffer
    if h.compression == 0:
        sec[0] = b.buffer.ptr + h.position + ENG_RECORD_BATCH_OVERHEAD
        sec_len[0] = h.size - ENG_RECORD_BATCH_OVERHEAD
        return b.buffer
    if h.compression > 4:
        raise UnsupportedCompressionTypeError(
            f"Unknown compression type id {h.compression}", position=h.position,
            offset=h.base_offset)
    raw = memoryview(b.buffer.obj).cast("B")[
        h.position + ENG_RECORD_BATCH_OVERHEAD:h.position + h.size]
    if scratch is not None:
        return decompress_section(
            h.compression, raw, b.buffer.ptr + h.position + ENG_RECORD_BATCH_OVERHEAD,
            h.size - ENG_RECORD_BATCH_OVERHEAD, scratch, b.max_decompressed_bytes, 2,
            h.position, h.base_offset, sec, sec_len)
    hv = BufferView(decompress(h.compression, raw, b.max_decompressed_bytes, 2,
                               h.position, h.base_offset))
    sec[0] = hv.ptr
    sec_len[0] = hv.nbytes
    return hv


cdef int _parse_views(RecordBatch b, const uint8_t *sec, size_t sec_len,
                      eng_record_view *views) except -1:
    cdef eng_error err
    cdef int rc
    cdef int64_t base_pos = b.h.position + ENG_RECORD_BATCH_OVERHEAD
    with nogil:
        rc = eng_parse_records(sec, sec_len, b.h.record_count, views, base_pos,
                               b.h.base_offset, &err)
    if rc != ENG_OK:
        if b.h.compression != 0:
            # positions inside a decompressed stream mean nothing in the file: name the batch
            msg = err.message.decode("utf-8", "replace")
            raise_status(err.code,
                         f"{msg} (byte {err.position - base_pos} of the decompressed records)",
                         position=b.h.position, offset=b.h.base_offset)
        raise_eng_error(&err)
    return 0


cdef eng_record_view *_alloc_views(RecordBatch b, size_t sec_len) except NULL:
    cdef int32_t count = b.h.record_count
    if count < 0 or <size_t>count > sec_len // 7:
        raise InvalidRecordError(
            f"Record count {count} is impossible for a records section of {sec_len} bytes",
            position=b.h.position, offset=b.h.base_offset)
    cdef eng_record_view *views = <eng_record_view *>malloc(
        (count if count > 0 else 1) * sizeof(eng_record_view))
    if views == NULL:
        raise MemoryError()
    return views


cdef enum:
    _KEY_SLOTS = 8


cdef struct _HeaderKeys:
    # header keys of the previous record, by index: their bytes (in the same section) and
    # the str made of them (a strong reference, released by _drop_keys)
    const uint8_t *ptr[_KEY_SLOTS]
    int32_t len[_KEY_SLOTS]
    PyObject *str[_KEY_SLOTS]


cdef inline void _drop_keys(_HeaderKeys *keys) noexcept:
    cdef int i
    for i in range(_KEY_SLOTS):
        Py_XDECREF(keys.str[i])
        keys.str[i] = NULL


cdef object _header_key(_HeaderKeys *keys, int32_t i, const uint8_t *p, int32_t n):
    """The header key at `p` as str. The records of a batch usually carry the same header
    keys: one equal to the previous record's key at this index is that same str."""
    if (i < _KEY_SLOTS and keys.str[i] != NULL and keys.len[i] == n
            and memcmp(keys.ptr[i], p, n) == 0):
        return <object>keys.str[i]
    s = PyUnicode_DecodeUTF8(<const char *>p, n, "surrogateescape")
    if i < _KEY_SLOTS:
        Py_XDECREF(keys.str[i])
        Py_INCREF(s)
        keys.str[i] = <PyObject *>s
        keys.ptr[i] = p
        keys.len[i] = n
    return s


cdef tuple _headers_tuple(const uint8_t *sec, const eng_record_view *r, _HeaderKeys *keys):
    cdef eng_header_view hv[16]
    cdef eng_header_view *hs = hv
    cdef int32_t i
    if r.headers_count == 0:
        return _NO_HEADERS
    if r.headers_count > 16:
        hs = <eng_header_view *>malloc(r.headers_count * sizeof(eng_header_view))
        if hs == NULL:
            raise MemoryError()
    cdef tuple out = PyTuple_New(r.headers_count)
    try:
        eng_parse_headers(sec, r, hs)
        for i in range(r.headers_count):
            pair = (_header_key(keys, i, sec + hs[i].key_off, hs[i].key_len),
                    _bytes_or_none(sec, hs[i].value_off, hs[i].value_len))
            Py_INCREF(pair)
            PyTuple_SET_ITEM(out, i, pair)
        return out
    finally:
        if hs != hv:
            free(hs)


cdef list _v2_records(RecordBatch b, object section=None):
    cdef const uint8_t *sec
    cdef size_t sec_len
    cdef const eng_batch_header *h = &b.h
    cdef BufferView sv
    cdef Scratch scratch = None
    if section is None or h.compression == 0 or h.record_count == 0:
        if h.compression != 0 and h.record_count != 0:
            scratch = take_scratch()  # records copy out of it, so the next batch may reuse it
        owner = _v2_section(b, &sec, &sec_len, scratch)
    else:
        sv = owner = BufferView(section)
        sec = sv.ptr
        sec_len = sv.nbytes
    cdef eng_record_view *views = _alloc_views(b, sec_len)
    cdef _HeaderKeys keys
    memset(&keys, 0, sizeof(keys))
    try:
        _parse_views(b, sec, sec_len, views)
        return _v2_build(h, sec, views, &keys)
    finally:
        _drop_keys(&keys)
        free(views)
        give_scratch(scratch)


cdef list _v2_build(const eng_batch_header *h, const uint8_t *sec,
                    const eng_record_view *views, _HeaderKeys *keys):
    """The Record objects of parsed views; consecutive equal timestamps share one int."""
    cdef const eng_record_view *r
    cdef int32_t i, seq
    cdef int64_t ts, last_ts = 0
    cdef object ts_obj = None
    cdef list out = PyList_New(h.record_count)  # items NULL until set (list_dealloc copes)
    for i in range(h.record_count):
        r = &views[i]
        seq = -1 if h.base_sequence < 0 else eng_increment_sequence(h.base_sequence,
                                                                    r.offset_delta)
        ts = _record_timestamp(h, r.timestamp_delta)
        if ts_obj is None or ts != last_ts:
            ts_obj = ts
            last_ts = ts
        rec = _new_record(
            _wrap_add(h.base_offset, r.offset_delta), ts_obj, h.timestamp_type,
            _bytes_or_none(sec, r.key_off, r.key_len),
            _bytes_or_none(sec, r.value_off, r.value_len),
            _headers_tuple(sec, r, keys) if r.headers_count else _NO_HEADERS,
            seq, h.is_control)
        Py_INCREF(rec)
        PyList_SET_ITEM(out, i, rec)
    return out


# ---- legacy v0/v1 ---------------------------------------------------------------------

cdef int _legacy_fields(const uint8_t *e, int32_t size, int64_t position, int64_t offset,
                        int32_t *key_off, int32_t *key_len, int32_t *value_off,
                        int32_t *value_len) except -1:
    """Key/value of one legacy message `e` (with its 12-byte offset+size framing)."""
    cdef int32_t pos = 18 + (8 if e[16] == 1 else 0)
    cdef int32_t n
    if size < pos + 4:
        raise CorruptRecordError("Legacy message too short for its key length",
                                 position=position, offset=offset)
    n = kb_load_i32(e + pos)
    pos += 4
    if n < -1 or (n > 0 and n > size - pos):
        raise CorruptRecordError(f"Invalid legacy key length {n}", position=position,
                                 offset=offset)
    key_off[0] = pos
    key_len[0] = n
    if n > 0:
        pos += n
    if size - pos < 4:
        raise CorruptRecordError("Legacy message too short for its value length",
                                 position=position, offset=offset)
    n = kb_load_i32(e + pos)
    pos += 4
    if n < -1 or (n > 0 and n > size - pos):
        raise CorruptRecordError(f"Invalid legacy value length {n}", position=position,
                                 offset=offset)
    value_off[0] = pos
    value_len[0] = n
    if n > 0:
        pos += n
    if pos != size:
        raise InvalidRecordError(
            f"Legacy message has {size - pos} bytes after its value", position=position,
            offset=offset)
    return 0


cdef object _legacy_inner_set(RecordBatch b):
    cdef const eng_batch_header *h = &b.h
    cdef const uint8_t *e = b.buffer.ptr + h.position
    cdef int32_t ko, kl, vo, vl
    _legacy_fields(e, h.size, h.position, h.base_offset, &ko, &kl, &vo, &vl)
    if h.compression == 0:
        return None
    if vl < 0:
        raise InvalidRecordError("Compressed legacy wrapper has a null value",
                                 position=h.position, offset=h.base_offset)
    raw = memoryview(b.buffer.obj).cast("B")[h.position + vo:h.position + vo + vl]
    return decompress(h.compression, raw, b.max_decompressed_bytes, h.magic, h.position,
                      h.base_offset)


cdef list _legacy_records(RecordBatch b, object inner=None):
    cdef const eng_batch_header *h = &b.h
    cdef const uint8_t *e = b.buffer.ptr + h.position
    cdef int32_t ko, kl, vo, vl
    if h.compression == 0:
        _legacy_fields(e, h.size, h.position, h.base_offset, &ko, &kl, &vo, &vl)
        return [_new_record(h.base_offset, h.base_timestamp, h.timestamp_type,
                            _bytes_or_none(e, ko, kl), _bytes_or_none(e, vo, vl),
                            _NO_HEADERS, -1, False)]
    if inner is None:
        inner = _legacy_inner_set(b)
    cdef BufferView iv = BufferView(inner)
    cdef size_t count = 0, valid = 0
    cdef eng_error err
    if eng_scan_count(iv.ptr, iv.nbytes, &count, &valid, &err) != ENG_OK:
        raise CorruptRecordError(
            f"Inner message set of a compressed wrapper: {err.message.decode('utf-8', 'replace')}",
            position=h.position, offset=h.base_offset)
    if valid != <size_t>iv.nbytes:
        raise CorruptRecordError(
            f"Inner message set of a compressed wrapper ends in a partial message "
            f"({iv.nbytes - valid} bytes)", position=h.position, offset=h.base_offset)
    inner_rows = np.empty(count, dtype=BATCH_HEADER_DTYPE)
    cdef eng_batch_header *rows = <eng_batch_header *>cnp.PyArray_DATA(inner_rows)
    eng_scan_fill(iv.ptr, count, 1, rows)
    cdef int64_t base = 0, ts
    cdef int8_t ts_type
    cdef size_t i
    cdef const eng_batch_header *r
    cdef list out = []
    if count == 0:
        return out
    if h.magic >= 1 and h.base_offset != 0:
        # v1 inner offsets are relative; the wrapper carries the last one's absolute offset
        base = _wrap_sub(h.base_offset, rows[count - 1].base_offset)
    for i in range(count):
        r = &rows[i]
        if r.magic == 2 or r.magic > h.magic:
            raise InvalidRecordError(f"Inner message of magic {r.magic} in a magic "
                                     f"{h.magic} wrapper", position=h.position,
                                     offset=h.base_offset)
        if r.compression != 0:
            raise InvalidRecordError("Compressed wrapper holds a compressed inner message",
                                     position=h.position, offset=h.base_offset)
        if not r.crc_valid:
            raise CorruptRecordError(
                f"Inner message {i} of a compressed wrapper has a bad CRC",
                position=h.position, offset=h.base_offset)
        _legacy_fields(iv.ptr + r.position, r.size, h.position, h.base_offset,
                       &ko, &kl, &vo, &vl)
        if h.magic == 1 and h.timestamp_type == 1:
            ts, ts_type = h.max_timestamp, 1
        else:
            ts, ts_type = r.base_timestamp, r.timestamp_type
        out.append(_new_record(_wrap_add(base, r.base_offset), ts, ts_type,
                               _bytes_or_none(iv.ptr + r.position, ko, kl),
                               _bytes_or_none(iv.ptr + r.position, vo, vl),
                               _NO_HEADERS, -1, False))
    return out
